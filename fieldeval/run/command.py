"""The command line's eval modules: which paths it names, which of them are eval modules, of which benchmarks.

Read before collection (the controller plans the run from them, and under pytest-xdist it never collects).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from fieldeval.defaults import MARKER
from fieldeval.errors import UsageError


def split_problem(config: pytest.Config) -> str | None:
    """The one line for pytest-split options that do not name one group of N, else None."""
    splits, group = getattr(config.option, "splits", None), getattr(config.option, "group", None)
    if splits is None and group is None:
        return None
    if splits is None or group is None:
        return f"--splits {splits} --group {group}: pass both, e.g. --splits 4 --group 1"
    if splits < 1 or not 1 <= group <= splits:
        return (f"--splits {splits} --group {group}: pass N >= 1 shards and a group from 1 to N, "
                "e.g. --splits 4 --group 1")
    return None


def selected_benchmarks(config: pytest.Config) -> dict[str, tuple[str, ...]]:
    """The eval modules (those marked ``fieldeval(benchmark=...)``) the command line names or holds in a folder,
    whatever they are called, as their items' node ids begin, with their benchmarks; a marker whose benchmark
    the source does not fix is a usage error."""
    modules = eval_modules(config, _command_paths(config))
    for module, names in modules.items():
        if "" in names:
            raise UsageError(f"{os.path.relpath(module, config.invocation_params.dir)}: @pytest.mark.{MARKER}("
                             "benchmark=...) names its benchmark by an expression; write the name as a string, "
                             'e.g. benchmark="ibf", so the run can be planned before collection')
    return {_nodeid_path(config, module): names for module, names in modules.items()}


def eval_modules(config: pytest.Config, paths: list[Path]) -> dict[Path, tuple[str, ...]]:
    """The eval modules under ``paths`` and their benchmarks, found as pytest would collect them."""
    from fieldeval.run.discover import marked_modules

    return marked_modules(paths, python_files=config.getini("python_files"),
                          norecursedirs=config.getini("norecursedirs"))


def only_eval_modules(config: pytest.Config) -> bool:
    """Whether every module the command line names or holds in a folder is an eval module."""
    from fieldeval.run.discover import test_modules

    paths = _command_paths(config)
    modules = test_modules(paths, python_files=config.getini("python_files"),
                           norecursedirs=config.getini("norecursedirs"))
    return bool(modules) and set(modules) <= set(eval_modules(config, paths))


def _command_paths(config: pytest.Config) -> list[Path]:
    args = [a.split("::")[0] for a in config.args if not a.startswith("-")] or config.getini("testpaths") or ["."]
    return [path for path in (_arg_path(config, arg) for arg in args) if path is not None]


def _nodeid_path(config: pytest.Config, module: Path) -> str:
    """A module's path as its items' node ids begin (relative to the rootdir, with ``/``)."""
    try:
        return module.resolve().relative_to(config.rootpath).as_posix()
    except ValueError:
        return module.resolve().as_posix()


def check_paths(config: pytest.Config) -> None:
    """A path on the command line that does not exist is a usage error naming the eval files (xdist's workers
    would otherwise collect nothing and the session end silently with exit 5)."""
    if config.args_source != pytest.Config.ArgsSource.ARGS:
        return
    for arg in config.args:
        path = _arg_path(config, arg.split("::")[0])
        if path is None or not path.exists():
            files = eval_files(config)
            hint = f"; the eval files are {', '.join(files)}" if files else ""
            what = "file, folder or module" if config.option.pyargs else "file or folder"
            raise UsageError(f"{arg.split('::')[0]}: no such {what}{hint}")


def eval_files(config: pytest.Config) -> list[str]:
    """The project's eval modules (under its testpaths, else its root), relative to where pytest runs."""
    folders = [config.rootpath / path for path in config.getini("testpaths")] or [config.rootpath]
    found = eval_modules(config, [folder for folder in folders if folder.exists()])
    return sorted(os.path.relpath(path, config.invocation_params.dir) for path in found)


def _arg_path(config: pytest.Config, arg: str) -> Path | None:
    path = (config.invocation_params.dir / arg).resolve()
    if path.exists() or not config.option.pyargs:
        return path
    import importlib.util

    try:
        spec = importlib.util.find_spec(arg)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.origin:
        return None
    return Path(spec.origin).parent if spec.submodule_search_locations else Path(spec.origin)


__all__ = ["check_paths", "eval_files", "eval_modules", "only_eval_modules", "selected_benchmarks", "split_problem"]
