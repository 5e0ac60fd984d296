"""Flink: hook, operator, sensor and trigger against a real cluster on 127.0.0.1."""
