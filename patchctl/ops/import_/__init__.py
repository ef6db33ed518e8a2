"""`patchctl import`: reading a patch source (sources.py) and recording it as a series
(record.py). Named after its command module, cli/commands/import_.py."""
