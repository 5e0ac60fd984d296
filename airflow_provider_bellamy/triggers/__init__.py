"""Triggers: asynchronous waits for Flink jobs and Spark applications."""
