"""BellamyJobSensor against Spark (standalone master JSON)."""
