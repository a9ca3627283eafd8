"""Documents and localization files: read a file into segments, translate them, rebuild it whole."""
