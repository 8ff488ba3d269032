"""The built-in benchmarks, one package each: ``ebs``, ``microbiorel``, ``ibf``.

Each package's ``__init__`` is its face, a :class:`fieldeval.benchmark.Benchmark`
named ``BENCHMARK``, registered under the ``fieldeval.benchmarks`` entry-point
group exactly as a third-party benchmark is.
"""
