"""The driver: Ray fan-out, Parquet results, resume, and the command line."""
