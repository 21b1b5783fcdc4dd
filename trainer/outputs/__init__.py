"""What a run leaves and reports: the model folder, metrics, the progress heartbeat, throughput, TensorBoard scalars."""
