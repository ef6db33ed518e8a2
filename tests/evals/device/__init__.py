"""Tests of the device scripts (evals/device/), loaded from their files by script_module."""
