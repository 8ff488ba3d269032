"""Load the fieldeval pytest plugin for every test under this root."""

pytest_plugins = ["fieldeval.plugin"]
