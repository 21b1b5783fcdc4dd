"""The dataset into what each rank trains on: reading, splitting, streaming, batch order, preprocessing, its schema."""
