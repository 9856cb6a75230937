"""Tokenizers: lossless round trips, the end-of-text id, and fingerprints that identify them."""
import pytest

from nvfp4_lab.data import BPETokenizer, ByteTokenizer, make_tokenizer
from nvfp4_lab.data.corpus import pydoc_documents

TEXTS = ["plain ascii", "tabs\tand\nnewlines\r\n", "Grüße, naïve café — ≈ ∑ 🚀", "  lead",
         ""]


@pytest.fixture(scope="module")
def bpe():
    return BPETokenizer.train([t for _, t in pydoc_documents()[:20]], 320)


def test_bytes_round_trip():
    tok = ByteTokenizer()
    for text in TEXTS:
        ids = tok.encode(text)
        assert ids == list(text.encode())
        assert tok.decode(ids) == text
        assert list(tok.encode_batch([text])[0]) == ids
    assert tok.vocab_size == 256 and tok.eot_id == 0


def test_bpe_round_trip_and_eot(bpe):
    assert bpe.vocab_size == 320 and bpe.name == "bpe320"
    assert bpe.eot_id == bpe.encode("<|endoftext|>")[0] == 0
    for text, ids in zip(TEXTS, bpe.encode_batch(TEXTS)):
        assert list(ids) == bpe.encode(text)
        assert bpe.decode(ids) == text  # byte-level: nothing is unknown, not even emoji
        assert all(0 <= i < bpe.vocab_size for i in ids)
    assert len(bpe.encode("the " * 50)) < len("the " * 50)


def test_bpe_save_load_keeps_fingerprint(bpe, tmp_path):
    bpe.save(tmp_path / "tokenizer.json")
    again = BPETokenizer.load(tmp_path / "tokenizer.json", bpe.vocab_size)
    assert again.fingerprint() == bpe.fingerprint()
    assert again.encode(TEXTS[2]) == bpe.encode(TEXTS[2])


def test_fingerprints_identify_the_definition(bpe):
    texts = [t for _, t in pydoc_documents()[:20]]
    assert BPETokenizer.train(texts, 320).fingerprint() == bpe.fingerprint()  # deterministic
    assert BPETokenizer.train(texts, 384).fingerprint() != bpe.fingerprint()
    assert BPETokenizer.train(texts[1:], 320).fingerprint() != bpe.fingerprint()
    assert ByteTokenizer().fingerprint() == make_tokenizer("bytes", [], 0).fingerprint()
    assert ByteTokenizer().fingerprint() != bpe.fingerprint()


def test_vocab_smaller_than_learned_is_refused(bpe, tmp_path):
    bpe.save(tmp_path / "t.json")
    with pytest.raises(ValueError, match="smaller than"):
        BPETokenizer.load(tmp_path / "t.json", 300)
