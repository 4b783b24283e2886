"""The grid's unit-of-work sizes: plain numbers, importable without pyarrow (--help shows them)."""

# Unit size bounds (rows of the grid per unit): large enough that a unit's fixed costs (a task,
# a file) are small next to evaluating it (~1 s per 10^6 rows per core), small enough that a
# lost unit costs little and progress moves.
UNIT_ROWS_MIN = 10_000
UNIT_ROWS_MAX = 1_000_000
UNIT_ROWS_DEFAULT = 200_000
