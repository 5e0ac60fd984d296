"""`python -m airflow_provider_bellamy.cli …`: the `bellamy` command where its script is not on PATH."""

import sys

from airflow_provider_bellamy.cli import main

sys.exit(main())
