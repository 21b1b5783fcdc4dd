"""The data contract: a new dataset's header (a CSV's first line, a Parquet footer) checked against the champion's
schema before any claim."""
