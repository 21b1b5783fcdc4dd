"""The adapters to Google Cloud — Cloud Storage, Pub/Sub, Vertex AI's JobService and Model Registry, Cloud Quotas —
over REST, with their one retry policy, the handler's deadline, and what they answer."""
