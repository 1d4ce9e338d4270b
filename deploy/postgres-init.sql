-- Run once by the postgres image on a new data folder (deploy/compose.yaml): Dagster's storage,
-- a database of its own beside the machine's (FOLLOWUP_DAGSTER_PG_URL names it).
CREATE DATABASE dagster;
