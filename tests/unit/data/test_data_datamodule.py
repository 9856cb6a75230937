"""LMDataModule: batches are a pure function of (seed, step, slot); validation is fixed."""
import itertools
from types import SimpleNamespace

import lightning.pytorch as L
import numpy as np
import pytest
import torch
from helpers.shard_writers import write_llmc

from nvfp4_lab.data import DataConfig, LMDataModule, Slots
from nvfp4_lab.data.datamodule import val_starts

SEQ, BATCH = 32, 4


def make_dm(pydoc_dirs, seed=0, tok="bytes", seq_len=SEQ, val_batches=3, **kw):
    dm = LMDataModule(pydoc_dirs[tok][0], seq_len=seq_len, batch_size=BATCH, seed=seed,
                      val_batches=val_batches, **kw)
    dm.setup("fit")
    return dm


def _stream(arr):
    return torch.from_numpy(np.asarray(arr, dtype=np.int64))


def test_batch_is_a_pure_function(pydoc_dirs):
    dm = make_dm(pydoc_dirs, seed=7)
    x, y = dm.batch(3, slot=1, slots=2)
    assert x.shape == y.shape == (BATCH, SEQ) and x.dtype == y.dtype == torch.int64
    # recomputed, by this or by a fresh module: identical
    assert all(torch.equal(a, b) for a, b in zip((x, y), dm.batch(3, 1, 2)))
    assert torch.equal(make_dm(pydoc_dirs, seed=7).batch(3, 1, 2)[0], x)
    # any other seed, step or slot: different windows
    others = [make_dm(pydoc_dirs, seed=8).batch(3, 1, 2), dm.batch(4, 1, 2), dm.batch(3, 0, 2),
              dm.batch(1, 3, 4)]
    assert not any(torch.equal(o[0], x) for o in others)
    with pytest.raises(ValueError, match="slot=2, slots=2"):
        dm.batch(3, 2, 2)


def test_slots_split_one_global_batch(pydoc_dirs):
    """One process with batch 4b sees, row for row, the 4 slots of batch b: whatever ranks
    and micro-batches hold them. With one slot the draw is the one of a single process before
    slots existed: the first b windows of the generator seeded by (seed, step, 0)."""
    small, big = make_dm(pydoc_dirs, seed=5), make_dm(pydoc_dirs, seed=5)
    big.batch_size = 4 * BATCH
    for step in (0, 9):
        whole = big.batch(step)[0]
        parts = torch.cat([small.batch(step, s, 4)[0] for s in range(4)])
        assert torch.equal(whole, parts)
        assert torch.equal(small.batch(step)[0], whole[:BATCH])
    from nvfp4_lab.data.datamodule import batch_seed
    g = torch.Generator().manual_seed(batch_seed(5, 9))
    train = small.data.train.arrays[0]          # a prepared folder: one file
    start = int(torch.randint(0, len(train) - SEQ, (1,), generator=g))
    want = torch.from_numpy(np.asarray(train[start:start + SEQ], dtype=np.int64))
    assert torch.equal(small.batch(9)[0][0], want)


def test_slot_is_micro_batch_then_rank():
    assert [Slots(world=2, accumulate=3, rank=1).slot(m) for m in range(3)] == [1, 3, 5]
    assert Slots(world=2, accumulate=3).count == 6
    assert Slots.of(None) == Slots()


def test_windows_come_from_the_train_split_and_cover_it(pydoc_dirs):
    dm = make_dm(pydoc_dirs)
    train = bytes(np.asarray(dm.data.train.arrays[0], np.uint8))  # bytes tokenizer: ids are bytes
    found = []
    for index in range(50):
        x, y = dm.batch(index)
        assert torch.equal(x[:, 1:], y[:, :-1])
        for row_x, row_y in zip(x, y):
            # x and y are one window of seq_len + 1 tokens of the stream, y shifted by one
            window = bytes(torch.cat([row_x, row_y[-1:]]).to(torch.uint8).tolist())
            found.append(train.find(window))
    assert min(found) >= 0
    # random windows with replacement reach both ends of the split
    assert min(found) < 0.05 * len(train) and max(found) > 0.95 * len(train)


@pytest.mark.parametrize("step, accumulate, rank, world", [(0, 1, 0, 1), (5, 1, 0, 1),
                                                          (5, 2, 1, 2), (5, 1, 1, 3)])
def test_train_loader_starts_at_the_step(pydoc_dirs, step, accumulate, rank, world):
    dm = make_dm(pydoc_dirs)
    dm.trainer = SimpleNamespace(global_step=step, accumulate_grad_batches=accumulate,
                                 global_rank=rank, world_size=world)
    got = list(itertools.islice(dm.train_dataloader(), 4))
    for k, (x, y) in enumerate(got):
        micro = k % accumulate
        want_x, want_y = dm.batch(step + k // accumulate, micro * world + rank,
                                  accumulate * world)
        assert torch.equal(x, want_x) and torch.equal(y, want_y)


def test_ranks_share_the_validation_batches_of_one_process(pydoc_dirs):
    """Two ranks of batch b evaluate, between them, the batches one process accumulating two
    micro-batches of b evaluates: the same windows, in the same batches."""
    def batches(accumulate, rank, world):
        dm = make_dm(pydoc_dirs)
        dm.trainer = SimpleNamespace(global_step=0, accumulate_grad_batches=accumulate,
                                     global_rank=rank, world_size=world)
        return [x for x, _ in dm.val_dataloader()]
    one = batches(2, 0, 1)
    ranks = [batches(1, r, 2) for r in (0, 1)]
    assert len(one) == 6 and [len(r) for r in ranks] == [3, 3]
    assert all(torch.equal(one[2 * k + r], ranks[r][k]) for k in range(3) for r in (0, 1))
    windows = torch.cat(one)
    assert len(torch.unique(windows, dim=0)) == 6 * BATCH     # 3 global batches of 2b


def test_val_windows_are_fixed_and_spread(pydoc_dirs):
    a = [torch.cat(b) for b in zip(*make_dm(pydoc_dirs, seed=0).val_dataloader())]
    b = [torch.cat(b) for b in zip(*make_dm(pydoc_dirs, seed=123).val_dataloader())]
    assert all(torch.equal(p, q) for p, q in zip(a, b))
    x, y = a
    assert x.shape == (3 * BATCH, SEQ)
    val = _stream(make_dm(pydoc_dirs).data.val.arrays[0])
    starts = val_starts(len(val), SEQ, 3 * BATCH)
    assert starts[0] == 0 and starts[-1] == len(val) - SEQ - 1  # first to last token
    assert np.all(np.diff(starts) >= SEQ)  # targets never counted twice
    for s, row_x, row_y in zip(starts, x, y):
        assert torch.equal(val[s:s + SEQ], row_x) and torch.equal(val[s + 1:s + SEQ + 1], row_y)


def test_short_val_split_warns_then_fails():
    with pytest.warns(UserWarning, match="holds only 3 windows"):
        starts = val_starts(100, 32, 10)
    assert list(starts) == [0, 33, 67]
    with pytest.raises(ValueError, match="fewer than one window"):
        val_starts(32, 32, 1)


def test_state_dict_refuses_other_data_or_seed(pydoc_dirs):
    dm = make_dm(pydoc_dirs)
    state = dm.state_dict()
    make_dm(pydoc_dirs).load_state_dict(state)
    with pytest.raises(ValueError, match="other seed"):
        make_dm(pydoc_dirs, seed=1).load_state_dict(state)
    with pytest.raises(ValueError, match="other data"):
        make_dm(pydoc_dirs, tok="bpe").load_state_dict(state)


def test_setup_without_prepare_is_a_clear_error(pydoc_cfg):
    dm = LMDataModule(pydoc_cfg(), seq_len=8, batch_size=2, seed=0, val_batches=1)
    with pytest.raises(FileNotFoundError, match="no prepared data"):
        dm.setup("fit")


class _Recorder(L.LightningModule):
    """Records the batches it is given; its one parameter never moves (lr 0)."""

    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(1))
        self.seen = []

    def training_step(self, batch, batch_idx):
        x, _ = batch
        self.seen.append(x.clone())
        return self.w * x.float().mean()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.0)


def _fit(dm, root, max_steps, ckpt_path=None):
    model = _Recorder()
    trainer = L.Trainer(max_steps=max_steps, accumulate_grad_batches=2, accelerator="cpu",
                        devices=1, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False,
                        limit_val_batches=0, default_root_dir=root)
    trainer.fit(model, datamodule=dm, ckpt_path=ckpt_path)
    return trainer, model.seen


# Lightning's advice (workers, logging) and a torch deprecation inside Lightning
@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.filterwarnings("ignore:.*LeafSpec")
def test_lightning_resume_sees_the_uninterrupted_batches(pydoc_dirs, tmp_path):
    cfg = pydoc_dirs["bytes"][0]

    def dm():
        return LMDataModule(cfg, seq_len=SEQ, batch_size=BATCH, seed=3, val_batches=1)
    _, straight = _fit(dm(), tmp_path, max_steps=4)
    trainer, first = _fit(dm(), tmp_path, max_steps=2)
    trainer.save_checkpoint(tmp_path / "half.ckpt")
    _, second = _fit(dm(), tmp_path, max_steps=4, ckpt_path=tmp_path / "half.ckpt")
    assert len(straight) == 8 and len(first) == 4 and len(second) == 4
    assert all(torch.equal(a, b) for a, b in zip(straight, first + second))
    ref = dm()
    ref.setup()
    assert all(torch.equal(x, ref.batch(i // 2, i % 2, 2)[0]) for i, x in enumerate(straight))


@pytest.fixture
def llmc_dir(tmp_path):
    """Three llm.c training shards of unequal length and two validation shards."""
    rng = np.random.default_rng(3)
    for name, n in (("fineweb_train_000001.bin", 700), ("fineweb_train_000002.bin", 330),
                    ("fineweb_train_000003.bin", 1500), ("fineweb_val_000000.bin", 300),
                    ("fineweb_val_000001.bin", 200)):
        write_llmc(tmp_path / name, rng.integers(0, 50257, n))
    return tmp_path


def shards_dm(folder, seed=0, batch_size=BATCH, **kw):
    cfg = DataConfig(source="shards", path=str(folder), train="fineweb_train_*.bin",
                     val="fineweb_val_*.bin", vocab_size=50304, **kw)
    dm = LMDataModule(cfg, seq_len=SEQ, batch_size=batch_size, seed=seed, val_batches=2)
    dm.setup("fit")
    return dm


def _loader(dm, step, accumulate=1, rank=0, world=1, n=6):
    dm.trainer = SimpleNamespace(global_step=step, accumulate_grad_batches=accumulate,
                                 global_rank=rank, world_size=world)
    return [x for x, _ in itertools.islice(dm.train_dataloader(), n)]


def _in_files(dm, rows) -> list[tuple[int, int]]:
    """(file, start) of each row of x: found by search in the train files' tokens."""
    found = []
    for row in rows.numpy():
        hits = [(f, s) for f, a in enumerate(dm.data.train.arrays)
                for s in range(len(a) - SEQ) if np.array_equal(a[s:s + SEQ], row)]
        assert len(hits) == 1
        found.append(hits[0])
    return found


@pytest.mark.parametrize("order", ["random", "sequential"])
def test_shards_draw_the_same_batches_again_and_after_a_resume(llmc_dir, order):
    first = _loader(shards_dm(llmc_dir, seed=4, order=order), step=0, n=8)
    again = _loader(shards_dm(llmc_dir, seed=4, order=order), step=0, n=8)
    resumed = _loader(shards_dm(llmc_dir, seed=4, order=order), step=5, n=3)
    assert all(torch.equal(a, b) for a, b in zip(first, again))
    assert all(torch.equal(a, b) for a, b in zip(first[5:], resumed))
    assert len({tuple(x.flatten().tolist()) for x in first}) == 8     # no step repeats


def test_random_shards_follow_the_seed_and_reach_every_file(llmc_dir):
    a, b = shards_dm(llmc_dir, seed=1), shards_dm(llmc_dir, seed=2)
    assert not torch.equal(a.batch(0)[0], b.batch(0)[0])
    files = [f for step in range(12) for f, _ in _in_files(a, a.batch(step)[0])]
    counts = np.bincount(files, minlength=3)
    assert counts.min() > 0 and counts.argmax() == 2       # the longest file most often


@pytest.mark.parametrize("order", ["random", "sequential"])
def test_two_ranks_of_shards_draw_the_one_process_global_batch(llmc_dir, order):
    one = _loader(shards_dm(llmc_dir, seed=6, batch_size=2 * BATCH, order=order), step=3, n=3)
    ranks = [_loader(shards_dm(llmc_dir, seed=6, order=order), step=3, rank=r, world=2, n=3)
             for r in (0, 1)]
    assert all(torch.equal(one[k], torch.cat([ranks[0][k], ranks[1][k]])) for k in range(3))


def test_sequential_shards_visit_every_window_once_per_epoch(llmc_dir):
    dm = shards_dm(llmc_dir, order="sequential", batch_size=1)
    lengths = [len(a) for a in dm.data.train.arrays]
    epoch = [(f, s) for f, n in enumerate(lengths) for s in range(0, n - SEQ, SEQ)]
    assert len(epoch) == 21 + 10 + 46
    seen = [_in_files(dm, dm.batch(step)[0])[0] for step in range(len(epoch) + 3)]
    assert seen == epoch + epoch[:3]


def test_validation_over_shards_is_fixed_and_stays_in_its_files(llmc_dir):
    dm = shards_dm(llmc_dir)
    dm.trainer = SimpleNamespace(global_step=0, accumulate_grad_batches=1, global_rank=0,
                                 world_size=1)
    rows = torch.cat([torch.cat([x, y[:, -1:]], 1) for x, y in dm.val_dataloader()])
    assert rows.shape == (2 * BATCH, SEQ + 1)
    val = dm.data.val.arrays
    starts = []
    for row in rows.numpy():
        hits = [(f, s) for f, a in enumerate(val) for s in range(len(a) - SEQ)
                if np.array_equal(a[s:s + SEQ + 1], row)]
        assert len(hits) == 1
        starts.append(hits[0])
    assert {f for f, _ in starts} == {0, 1}                   # both val files are read
    assert all(f0 != f1 or s1 - s0 >= SEQ for (f0, s0), (f1, s1) in zip(starts, starts[1:]))
