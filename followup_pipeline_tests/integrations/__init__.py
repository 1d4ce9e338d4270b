"""Tests of the vendor clients and their Dagster resources."""
