"""Where the trainer reads and writes: local folders (the /gcs/ mount too) and gs:// ones, uploading in parallel."""
