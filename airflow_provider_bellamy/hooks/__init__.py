"""Airflow hooks: the Bellamy store (façade) and the clusters jobs run on."""
