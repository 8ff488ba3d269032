"""Data shipped inside the package: the value sets (enum_data/) and fixtures/ of the repository."""
