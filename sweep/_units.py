"""The grid's unit-of-work sizes: plain numbers, importable without pyarrow (--help shows them)."""

# Unit size bounds (rows of the grid per unit): large enough that a unit's fixed costs (a task,
# a file) are small next to evaluating it (~1 s per 10^6 rows per core), small enough that a
# lost unit costs little and progress moves.
UNIT_ROWS_MIN = 10_000
UNIT_ROWS_MAX = 1_000_000
UNIT_ROWS_DEFAULT = 200_000

# A search's Parquet part: at least this many rows (the last part of a run may hold fewer), written
# with the searcher's checkpoint (sweep._search_engine.Pending). Ten thousand rows are a few hundred
# kilobytes in memory and on disk; a run of 10^5 evaluations is about ten parts.
PART_ROWS_DEFAULT = 10_000
