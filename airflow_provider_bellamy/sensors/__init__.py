"""Sensors: waits for submitted Flink jobs and Spark applications, with runtime write-back."""
