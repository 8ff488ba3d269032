"""The eval modules, one per benchmark; shipped in the wheel as ``fieldeval.bundled.evals``."""
