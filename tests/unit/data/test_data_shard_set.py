"""ShardSet: windows named by index over several files, or in order, epoch by epoch; never
across two files; ids the files do not bound checked per batch."""
import numpy as np
import pytest

from nvfp4_lab.data.shard_set import ShardSet
from nvfp4_lab.data.shards import ShardError

T = 4
# the middle file is too short for a window of T + 1; the last holds 3 T tokens, which make
# only 2 non-overlapping windows of T + 1
LENGTHS = (9, 3, 12)


def _files(lengths=LENGTHS) -> ShardSet:
    """File f holds 1000 f, 1000 f + 1, ...: a window's first id says where it starts."""
    arrays = tuple(1000 * f + np.arange(n) for f, n in enumerate(lengths))
    return ShardSet(tuple(f"f{f}.bin" for f in range(len(lengths))), arrays)


def _where(rows: np.ndarray) -> list[tuple[int, int]]:
    return [(int(r[0]) // 1000, int(r[0]) % 1000) for r in rows]


def test_every_index_is_one_window_of_one_file_and_each_window_has_one_index():
    files = _files()
    want = [(f, s) for f, n in enumerate(LENGTHS) for s in range(n - T)]   # whole windows
    assert files.n_starts(T) == len(want) == 5 + 8
    rows = files.at(np.arange(files.n_starts(T)), T)
    assert _where(rows) == want
    # a window is seq_len + 1 consecutive ids of its file
    assert np.array_equal(rows - rows[:, :1], np.tile(np.arange(T + 1), (len(rows), 1)))
    with pytest.raises(IndexError):
        files.at(np.array([files.n_starts(T)]), T)


def test_one_file_names_its_windows_by_their_start():
    """A prepared folder's single train.bin: the index is the start, as before shards."""
    tokens = np.random.default_rng(0).integers(0, 50, 100)
    one = ShardSet(("train.bin",), (tokens,))
    starts = np.array([0, 17, 95])
    rows = one.at(starts, T)
    assert one.n_starts(T) == 100 - T
    assert all(np.array_equal(r, tokens[s:s + T + 1]) for r, s in zip(rows, starts))


def test_in_order_visits_every_window_once_per_epoch():
    files = _files()
    epoch = [(f, s) for f, n in enumerate(LENGTHS) for s in range(0, n - T, T)]
    assert files.n_windows(T) == len(epoch) == 2 + 2
    seen = _where(files.in_order(np.arange(3 * len(epoch)), T))
    assert seen == epoch * 3
    # windows of one epoch never share a target
    rows = files.in_order(np.arange(len(epoch)), T)
    targets = [(int(v) // 1000, int(v)) for r in rows for v in r[1:]]
    assert len(targets) == len(set(targets))


def test_ids_beyond_the_vocabulary_are_caught_in_the_batch_that_reads_them():
    arrays = (np.arange(20), np.array([1, 2, 3, 99, 4, 5, 6, 7]))
    checked = ShardSet(("a.bin", "b.bin"), arrays, limit=50)
    assert checked.at(np.arange(16), T).max() < 50       # file a: every id below 50
    with pytest.raises(ShardError) as err:
        checked.at(np.array([16]), T)                     # b's first window holds 99
    assert str(err.value).startswith("b.bin: token 3 is id 99, not below the model's "
                                     "vocabulary 50")
    assert ShardSet(("a.bin", "b.bin"), arrays).at(np.array([16]), T).max() == 99
