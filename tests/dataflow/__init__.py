"""The dataflow layer, operator by operator, with known answers: one file per family of
operators (as ``pytimely/dataflow/operators/`` is laid out), mirroring what timely-dataflow's
tests and doctests check (https://github.com/TimelyDataflow/timely-dataflow, ``timely/tests``
and the doctests of ``timely/src/dataflow/operators``)."""
