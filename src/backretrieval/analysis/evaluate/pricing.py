"""What each model of a grid costs: the facts ``run.json`` records per model (``encoding``) and the
dry run's estimate (:func:`estimate`).

Every model of a run gets its price, whether it encoded anything in the run or not
(:func:`price_facts`): the vector size (:func:`~backretrieval.encoders.prices.bytes_per_item`:
the model's own ``bytes_per_item`` where it is served in another form, else 4 bytes per
dimension), its encoding throughput on this machine and the tokens per item. The throughput is
the model's record in the price book beside the embedding cache
(:mod:`backretrieval.encoders.prices`): a run that encodes texts measures them and records the
measurement (a record covering more texts is kept), and then reports the record of its texts'
length class; a run whose vectors all come from the cache, or whose records all come from an
earlier run, reports that record too ("measured YYYY-MM-DD on this machine"), or, when there is
none, measures the model on a small fixed sample of its texts first (``EvalConfig.measure_speed``
False: not measured, and the page says so). So a rerun into the same ``--out``, a new ``--out``
and ``br.compare`` of the finished result show the same price. A variant (``use-m@trunc=128``)
is encoded by its base model: it has the base model's throughput and its own vector size. An
embedding API is never measured on a sample (that would be paid): its throughput and tokens are
what it took when its vectors were made; a server that reports no usage has no token count
("not reported"), so its cost is unknown, not $0. A model without a stable identity (a Python
object given no version) is timed in the run and recorded nowhere.
"""
from __future__ import annotations

from typing import Any, Callable

from ...data.corpus import fingerprint
from ...encoders.cache import CachedTextEncoder
from ...encoders.prices import (Measurement, PriceBook, bytes_per_item, length_class, machine, measure_sample)

NOT_MEASURED = "not measured (--no-measure-speed)"
FIT_MARK = "+fit:"  # where a fitted model's identity names the texts it is fitted on (records.fingerprint_inputs)
NOT_REPORTED = "not reported by the server"


def speed_parts(cached: CachedTextEncoder) -> tuple[CachedTextEncoder, Any]:
    """The cache whose timer holds ``cached``'s encoding time and the model that encodes: a
    variant's base model (behind its own cache), else ``cached`` and its model.

    Args:
        cached: a model behind its cache.

    Returns:
        ``(cache, model)``.
    """
    base = getattr(cached.encoder, "base", None)
    if isinstance(base, CachedTextEncoder):
        return base, base.encoder
    return cached, cached.encoder


def speed_identity(enc: Any, identity: str) -> str:
    """The identity the throughput of model ``enc`` is recorded under: its identity in the records,
    or for a variant its base model's version, without the fingerprint of the texts a fitted
    model is fitted on (they change its vectors, not its speed: a TF-IDF model fitted on other
    texts encodes at the speed recorded for the first ones, so the dry run can tell).

    Args:
        enc: the model (before it is fitted).
        identity: its identity in the records.

    Returns:
        The identity.
    """
    base = getattr(enc, "base", None)
    own = str(base.encoder.version) if isinstance(base, CachedTextEncoder) else identity
    return own.split(FIT_MARK, 1)[0]


def corpus_fit_fingerprint(corpora: dict[str, Any]) -> str:
    """The fingerprint of the texts a fitted model is fitted on: every needed row of every
    language (as :meth:`~.features.Features.fit_fingerprint` computes it).

    Args:
        corpora: language -> the corpus of the needed rows.

    Returns:
        The fingerprint.
    """
    return fingerprint(d for lang in corpora for d in (lang.encode(), *corpora[lang].row_digests()))


def _texts(corpora: dict[str, Any]) -> dict[str, list[str]]:
    return {lang: list(dict.fromkeys(c.texts)) for lang, c in corpora.items()}


def _mean_chars(texts: dict[str, list[str]]) -> float:
    n = sum(len(t) for t in texts.values())
    return sum(len(x) for t in texts.values() for x in t) / n if n else 0.0


def paid(enc: Any) -> bool:
    """Whether encoding with ``enc`` is paid by the request.

    Args:
        enc: a text model.

    Returns:
        True for an embedding API (a model with ``estimate``).
    """
    return callable(getattr(enc, "estimate", None))


def _tokens(model: Any, texts: dict[str, list[str]], details: dict[str, Any]) -> tuple[float | None, str | None]:
    """Tokens per item and how they were counted: an API's reported usage in this run (None and
    "not reported" where the server reported none), a model's own tokenizer, else unknown."""
    if paid(model):
        sent = details.get("texts_with_usage")
        if details.get("texts_sent"):
            if sent:
                return round(details["tokens_used"] / sent, 3), "reported by the server"
            return None, NOT_REPORTED
        return None, None
    count = getattr(model, "count_tokens", None)
    n = sum(len(t) for t in texts.values())
    if callable(count) and n:
        total = sum(count(t) for t in texts.values())
        return round(total / n, 3), str(getattr(model, "tokens_counted_by", "the model's own tokenizer"))
    return None, None


def price_facts(name: str, model: Any, cached: CachedTextEncoder | None, corpora: dict[str, Any], identity: str,
                speed_id: str, *, seconds: float = 0.0, measure: bool = True, run_only: bool = False,
                book: PriceBook | None = None, log: Callable[[str], None] = lambda msg: None) -> dict[str, Any]:
    """What ``run.json`` records of one model: the texts it needed and encoded in this run, the
    seconds that took, its vector size, throughput (from the price book, see the module
    docstring), tokens per item, price, and what the model reports of itself (``run_details``).

    Args:
        name: the model's label.
        model: the model as the grid built it (encodes the fixed sample when nothing is known).
        cached: the model behind its cache as this run encoded with it; None when the run
            encoded nothing with it (every record from an earlier run).
        corpora: language -> the corpus of the needed rows.
        identity: the model's identity in the records.
        speed_id: :func:`speed_identity`.
        seconds: the run's encoding wall time of the model.
        measure: measure on the fixed sample when the price book knows nothing.
        run_only: the model has no stable identity (nothing recorded; this run's timing only).
        book: the price book (default: the one beside the embedding cache).
        log: told when the fixed sample is measured.

    Returns:
        ``{"texts", "encoded", "seconds", "cpu_seconds" (this run's, of the calls to the model),
        "dim", "bytes_per_item", "speed", "speed_note",
        "tokens_per_item", "tokens_counted_by", "price_per_1m_tokens", ...}``: ``speed`` is the
        recorded :class:`~backretrieval.encoders.prices.Measurement` as JSON (None: unknown).
    """
    book = book or PriceBook()
    enc = cached.encoder if cached is not None else model
    texts = _texts(corpora)
    details = getattr(enc, "run_details", None)
    details = dict(details) if isinstance(details, dict) else {}
    dim = getattr(enc, "dim", None)
    dim = int(dim) if isinstance(dim, int) and not isinstance(dim, bool) else None
    out: dict[str, Any] = {"texts": sum(len(t) for t in texts.values()),
                           "encoded": int(cached.n_encoded) if cached is not None else 0, "seconds": seconds}
    out.update(details)
    if not run_only:
        shape = book.shape(identity, dim, bytes_per_item(enc, dim))
        dim, size = shape if shape is not None else (dim, bytes_per_item(enc, dim))
    else:
        size = bytes_per_item(enc, dim)
    timer_owner, speed_model = speed_parts(cached if cached is not None else CachedTextEncoder(model))
    # the CPU time of this run's calls to the model (the steadier measure on a shared machine)
    out["cpu_seconds"] = round(sum(step[2] for step in timer_owner.timer.steps), 3) if cached is not None else 0.0
    mach = machine(speed_model)
    cls = length_class(_mean_chars(texts))
    here = getattr(speed_model, "on_this_machine", True)
    m = timer_owner.timer.measurement("run", getattr(speed_model, "batch_size", None)) if cached is not None and here else None
    if m is not None:
        base_dim = getattr(speed_model, "dim", None)
        m.dim = int(base_dim) if isinstance(base_dim, int) else None
        m.bytes_per_item = bytes_per_item(speed_model, m.dim)
        m.tokens_per_item, m.tokens_counted_by = _tokens(speed_model, texts, details)
        if not run_only:
            book.write(speed_id, mach, m, name)
    rec = m if run_only else book.read(speed_id, mach, cls)
    note = None
    if not run_only and (rec is None or rec.length_class != cls) and not paid(speed_model) and here:
        if measure:
            log(f"{name}: measuring its encoding speed on a fixed sample of its texts (none recorded on this machine "
                f"for texts of {cls})")
            if callable(getattr(speed_model, "fit", None)) and not getattr(speed_model, "fitted", False):
                speed_model.fit(texts)  # a model fitted on the evaluated texts (the records' identity says so)
            s = measure_sample(speed_model, texts)
            if s is not None:
                s.tokens_per_item, s.tokens_counted_by = _tokens(speed_model, texts, {})
                s.dim = getattr(speed_model, "dim", None)
                s.bytes_per_item = bytes_per_item(speed_model, s.dim)
                book.write(speed_id, mach, s, name)
                rec = book.read(speed_id, mach, cls)
        elif rec is None:
            note = NOT_MEASURED
    out.update({"dim": dim, "bytes_per_item": size, "speed": None if rec is None else rec.to_json(),
                "speed_note": note or speed_note(rec, run_only, paid(speed_model)),
                "items_per_second": None if rec is None else rec.items_per_second,
                "machine": {k: mach[k] for k in ("cpu", "cores", "device")}})
    tokens, how = (rec.tokens_per_item, rec.tokens_counted_by) if rec is not None else (None, None)
    if paid(speed_model) and rec is None:
        tokens, how = _tokens(speed_model, texts, details)
    out.update({"tokens_per_item": tokens, "tokens_counted_by": how,
                "price_per_1m_tokens": details.get("price_per_1m_tokens", getattr(speed_model, "price", None))})
    return out


def speed_note(rec: Measurement | None, run_only: bool = False, api: bool = False) -> str:
    """How the page says where a throughput comes from: ``"measured YYYY-MM-DD on this machine
    (1,200 texts of 16-31 chars)"``; for a model without a record, why there is none.

    Args:
        rec: the record (None: none).
        run_only: the model has no stable identity.
        api: the model is an embedding API (never measured on a sample).

    Returns:
        The note.
    """
    if rec is None:
        if api:
            return "unknown: an embedding API is timed only when it is sent texts"
        return "unknown: no text encoded here" if run_only else "unknown"
    what = "this run" if run_only else "this machine"
    sample = " on a fixed sample" if rec.how == "sample" else ""
    return f"measured {rec.measured} on {what}{sample} ({rec.items:,} texts of {rec.length_class})"


def send_estimate(cached: CachedTextEncoder, corpora: dict[str, Any]) -> dict[str, Any] | None:
    """What a model with ``estimate`` (an embedding API) would send for the texts of ``corpora``
    that the cache lacks; None for any other model. A variant or serving form of an API
    (``openai:M@int8``) sends what its base model sends.

    Args:
        cached: the model behind its cache.
        corpora: language -> the corpus whose texts are encoded.

    Returns:
        The model's estimate (``texts``, ``requests``, ``tokens``, ``tokenizer``, ``cost``, ...)
        summed over the languages, with ``cached``: the texts already in the cache.
    """
    owner, model = speed_parts(cached)
    estimate = getattr(model, "estimate", None)
    if not callable(estimate):
        return None
    total: dict[str, Any] = {"texts": 0, "requests": 0, "tokens": 0, "cached": 0}
    for lang, c in corpora.items():
        todo = owner.missing(c.texts, lang)
        est = estimate(todo)
        total["cached"] += len(set(c.texts)) - len(todo)
        for k, v in est.items():
            total[k] = total[k] + v if k in ("texts", "requests", "tokens") else v
    if total.get("price_per_1m_tokens") is not None:
        total["cost"] = total["tokens"] / 1e6 * total["price_per_1m_tokens"]
    return total


def estimate_line(name: str, est: dict[str, Any]) -> str:
    """The one line that says what model ``name`` will send or encode (see :func:`send_estimate`
    and :func:`model_estimate`).

    Args:
        name: the model's label.
        est: its estimate.

    Returns:
        ``"openai:x: 1,200 texts to send in 19 requests (300 already cached), about 9,400 tokens
        (approximation: ...), about $0.0002 at $0.02 per 1M tokens"``, and where the estimate
        holds a time (:func:`model_estimate`), ``"; about 4.2 s on this machine (...)"``;
        ``"use-m: 1,200 texts to encode (300 already cached); about 4.2 s ..."`` for a model
        that is not paid by the request.
    """
    if "requests" in est:
        cost = (f", about ${est['cost']:.4f} at ${est['price_per_1m_tokens']:g} per 1M tokens"
                if est.get("cost") is not None else ", cost unknown (no price_per_1m_tokens option)")
        head = (f"{name}: {est['texts']:,} texts to send in {est['requests']:,} requests ({est['cached']:,} already "
                f"cached), about {est['tokens']:,} tokens ({est['tokenizer']}){cost}")
    else:
        head = f"{name}: {est['texts']:,} texts to encode ({est['cached_note']})"
    if "seconds" not in est:
        return head
    if est["seconds"] is None:
        return f"{head}; time unknown ({est['speed_note']})"
    return f"{head}; about {_duration(est['seconds'])} on this machine ({est['speed_note']})"


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.1f} s"
    return f"{seconds / 60:.1f} min" if seconds < 7200 else f"{seconds / 3600:.1f} h"


def model_estimate(name: str, model: Any, corpora: dict[str, Any], identity: str, *, run_only: bool = False,
                   book: PriceBook | None = None) -> dict[str, Any]:
    """What encoding model ``model`` for ``corpora`` would take, before anything is encoded or
    sent (``--dry-run``): the texts its cache lacks, the time at the throughput recorded on
    this machine for texts of their length (:mod:`backretrieval.encoders.prices`: the first
    batch's load time and the texts at the recorded rate), and for an embedding API what
    :func:`send_estimate` says.

    Args:
        name: the model's label.
        model: the model.
        corpora: language -> the corpus of the needed rows.
        identity: the model's identity (as the records' keys compute it).
        run_only: the model has no stable identity (nothing is recorded of it).
        book: the price book (default: the one beside the embedding cache).

    Returns:
        ``{"texts", "cached", "cached_note", "seconds" (None: unknown), "cpu_seconds" (at the
        recorded items per CPU-second), "speed_note", "speed"}``, and for an embedding API its
        :func:`send_estimate` besides.
    """
    book = book or PriceBook()
    cached = CachedTextEncoder(model)
    owner, speed_model = speed_parts(cached)
    texts = _texts(corpora)
    total = sum(len(t) for t in texts.values())
    if getattr(speed_model, "cacheable", True) and not run_only:
        todo = {lang: owner.missing(t, lang) for lang, t in texts.items()}
        note_cached = f"{total - sum(map(len, todo.values())):,} already cached"
    else:
        todo = texts
        note_cached = "not cached: " + ("fitted on the evaluated texts" if callable(getattr(speed_model, "fit", None))
                                        else "computed afresh in every run")
    n = sum(len(t) for t in todo.values())
    out: dict[str, Any] = {"texts": n, "cached": total - n, "cached_note": note_cached}
    api = send_estimate(cached, corpora)
    if api is not None:
        out.update(api)
    rec = None
    if not run_only:
        sid = speed_identity(model, identity)
        rec = book.read(sid, machine(speed_model), length_class(_mean_chars(todo if n else texts)))
    out["speed"] = None if rec is None else rec.to_json()
    if rec is None:
        out["seconds"], out["speed_note"] = None, ("no throughput recorded on this machine"
                                                   + ("" if paid(speed_model) else "; a run measures it"))
    else:
        out["seconds"] = round(rec.warmup_seconds + n / rec.items_per_second, 2) if n else 0.0
        cpu_rate = rec.items_per_cpu_second
        out["cpu_seconds"] = (round(rec.warmup_cpu_seconds + n / cpu_rate, 2) if n else 0.0) if cpu_rate else None
        out["speed_note"] = (f"at {rec.items_per_second:,.4g} texts/s and {rec.warmup_seconds:.1f} s to start, "
                             + speed_note(rec).replace(" on this machine", ""))
    return out


def model_identity(model: Any, corpora: dict[str, Any]) -> str:
    """The identity the records key ``model`` by (its version, with the fingerprint of the texts
    of ``corpora`` for a model fitted on them), computed before anything is fitted.

    Args:
        model: the model.
        corpora: language -> the corpus of the needed rows.

    Returns:
        The identity.
    """
    fitted = callable(getattr(model, "fit", None)) and getattr(model, "fitted_on_texts", True)
    return str(model.version) + (f"{FIT_MARK}{corpus_fit_fingerprint(corpora)}" if fitted else "")
