"""The IBF corpus version a run uses when none is named (a module of its own: the face reads it without the corpus's
reader)."""

from __future__ import annotations

DEFAULT_VERSION = "ibf-v1.0"
