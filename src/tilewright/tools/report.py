"""Sweep and benchmark reports: tables (CSV, markdown, self-contained HTML) and PNG plots.

A :class:`Sweep` is what ``tilewright tune`` measured: one row per (shape, backend, config) with the peer (cuBLAS)
timed in the same run, plus a ``meta`` dict (device facts, versions, the card's measured peak). It is saved as
``sweep.csv`` + ``sweep.json`` and :func:`write_report` renders it - again at any time, ``tilewright report PATH``:

* ``sweep.csv``   every row, with ``pct_of_peer`` (100 x peer time / time: > 100 is faster than cuBLAS) and
                  ``pct_of_peak`` (TFLOP/s over the card's measured peak);
* ``winners.csv`` one row per shape: each backend's best config and time, the winner, its ratio to the peer;
* ``report.md`` / ``report.html`` both tables (the HTML embeds the plots, so it is one file to send around);
* ``plots/*.png`` (matplotlib, part of the ``bench`` extra: skipped with a note when it is not installed): per-shape bars of the best
  Triton / CUDA config vs the peer, a BLOCK_M x BLOCK_N heat map of Triton TFLOP/s for one shape, and the best
  TFLOP/s per tile order per shape.

The same writers render ``tilewright bench`` results (the long format of ``bench/common.py``):
:func:`write_bench_report` and :func:`ratio_table`.
"""
from __future__ import annotations

import base64
import html
import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..bench.common import BENCH_EXTRA, require_pandas

pd = require_pandas("tilewright.tools.report")

PEER = "peer"
BACKENDS = ("triton", "cuda")
SWEEP_COLUMNS = ["op", "shape", "M", "N", "K", "dtype", "backend", "config", "block_m", "block_n", "block_k",
                 "stages", "warps", "tile_order", "schedule", "loads", "median_ms", "tflops", "pct_of_peer",
                 "pct_of_peak", "n_regs", "n_spills", "rel_err", "status", "config_json"]
WINNER_COLUMNS = ["shape", "M", "N", "K", "peer", "peer_ms", "triton_config", "triton_ms", "cuda_config", "cuda_ms",
                  "winner", "winner_config", "winner_ms", "winner_tflops", "vs_peer", "pct_of_peak"]
ORDER_COLORS = {"row_major": "#9e9e9e", "grouped": "#1f77b4", "morton": "#2ca02c", "hilbert": "#d62728"}
BACKEND_COLORS = {"triton": "#1f77b4", "cuda": "#ff7f0e", PEER: "#7f7f7f"}


@dataclass
class Sweep:
    """A tuning sweep: ``df`` (one row per shape x backend x config, :data:`SWEEP_COLUMNS`) and ``meta``."""

    df: pd.DataFrame
    meta: dict

    @classmethod
    def from_rows(cls, rows: list[dict], meta: dict) -> "Sweep":
        """Build from the tuner's row dicts; adds the derived % columns."""
        return cls(analyze(pd.DataFrame(rows), meta.get("peak_tflops")), dict(meta))

    def save(self, out_dir) -> dict[str, Path]:
        """Write ``sweep.csv`` and ``sweep.json`` (meta) into ``out_dir``; return their paths."""
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        paths = {"sweep_csv": out / "sweep.csv", "sweep_json": out / "sweep.json"}
        self.df.to_csv(paths["sweep_csv"], index=False)
        paths["sweep_json"].write_text(json.dumps(self.meta, indent=1, default=str))
        return paths

    @classmethod
    def load(cls, path) -> "Sweep":
        """Read a saved sweep: its folder, its ``sweep.csv`` or its ``sweep.json``."""
        path = Path(path)
        folder = path if path.is_dir() else path.parent
        csv = folder / "sweep.csv" if path.is_dir() or path.suffix == ".json" else path
        if not csv.exists():
            raise FileNotFoundError(f"no sweep.csv at {csv}")
        meta_path = csv.with_suffix(".json")
        meta = read_json(meta_path, "the sweep's meta data (a JSON object)") if meta_path.exists() else {}
        df = read_csv(csv, SWEEP_EXPECTED)
        missing = {"shape", "backend", "config", "median_ms"} - set(df.columns)
        if missing:
            raise ValueError(f"{csv}: not a tilewright sweep (missing columns {sorted(missing)}); expected "
                             f"{SWEEP_EXPECTED}")
        check_numeric(df, csv, ["median_ms", "tflops"], SWEEP_EXPECTED)
        peak = meta.get("peak_tflops")
        return cls(analyze(df, peak if isinstance(peak, (int, float)) else None), meta)


# What `tilewright report` accepts, said in every error about an input it cannot use.
SWEEP_EXPECTED = "a tune sweep (sweep.csv as `tilewright tune` writes it)"
BENCH_EXPECTED = "tilewright bench results (CSV with op, case, provider, speedup columns)"
EITHER_EXPECTED = f"{SWEEP_EXPECTED} or {BENCH_EXPECTED}"


def read_csv(path: Path, expected: str) -> pd.DataFrame:
    """``pd.read_csv(path)``, or a ValueError naming the file and what was ``expected`` when it is no CSV (binary,
    empty, ragged) - pandas' own errors name neither."""
    try:
        return pd.read_csv(path)
    except (UnicodeDecodeError, pd.errors.ParserError, pd.errors.EmptyDataError) as e:
        reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ValueError(f"{path}: not a readable CSV file ({reason}); expected {expected}") from None
    except IsADirectoryError:
        raise ValueError(f"{path}: a folder where a CSV file was expected; expected {expected}") from None


def read_json(path: Path, expected: str) -> dict:
    """A JSON object from ``path``, or a ValueError naming the file and what was ``expected``."""
    try:
        data = json.loads(path.read_text())
    except (UnicodeDecodeError, ValueError) as e:
        raise ValueError(f"{path}: not valid JSON ({e}); expected {expected}") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path}: a JSON {type(data).__name__}; expected {expected}")
    return data


def check_numeric(df: pd.DataFrame, path: Path, columns, expected: str) -> None:
    """Raise a ValueError naming the file and column when a column that must hold numbers holds other text."""
    for col in columns:
        if col in df and not pd.api.types.is_numeric_dtype(df[col]):
            bad = df[col][pd.to_numeric(df[col], errors="coerce").isna() & df[col].notna()]
            if len(bad):
                raise ValueError(f"{path}: column {col!r} holds {str(bad.iloc[0])!r} where a number was expected; "
                                 f"expected {expected}")


def analyze(df: pd.DataFrame, peak_tflops: float | None = None) -> pd.DataFrame:
    """Add ``pct_of_peer`` (100 x peer time / time, per shape) and ``pct_of_peak``; order the columns."""
    df = df.copy()
    for col in SWEEP_COLUMNS:
        if col not in df:
            df[col] = np.nan
    if len(df):
        peer_ms = df[df.backend == PEER].groupby("shape").median_ms.min()
        df["pct_of_peer"] = 100 * df["shape"].map(peer_ms) / df.median_ms
        df["pct_of_peak"] = 100 * df.tflops / peak_tflops if peak_tflops else np.nan
    extra = [c for c in df.columns if c not in SWEEP_COLUMNS]
    return df[SWEEP_COLUMNS + extra]


# Two sweeps of one shape on two GPUs of one host (or one GPU twice) time the same candidates 1-2% apart (up to 7% on
# a few), so the fastest-measured config of near-ties was noise: the one-GPU and two-GPU runs of the default suite
# agreed on 2 of 11 winners, with winner times within 1-2% on 8 of them. A candidate within TIE_BAND of the fastest
# counts as tied, and of tied candidates the first in the sweep's order wins (then the first backend in BACKENDS):
# reproducible winners - the same cache from any run, or GPU, of one card - for at most TIE_BAND of measured time.
TIE_BAND = 0.015


def _first_of_tied(sub: pd.DataFrame) -> pd.Series:
    """The first row (sweep order) of ``sub`` whose time is within TIE_BAND of its fastest."""
    return sub[sub.median_ms <= sub.median_ms.min() * (1 + TIE_BAND)].iloc[0]


def winners(df: pd.DataFrame) -> pd.DataFrame:
    """One row per shape: each backend's best (timed, correct) config, the overall winner and its ratio to the peer.
    Near-ties (within TIE_BAND) go to the first candidate in the sweep's order, then the first backend. Where a
    shape's contenders were re-timed (a ``sweep_ms`` column, :func:`tilewright.tools.tuner.run_finals`), a backend's
    best is chosen among its re-timed rows: their times were taken side by side, the others' earlier."""
    ok = df[(df.status == "ok") & df.median_ms.notna()] if "status" in df else df[df.median_ms.notna()]
    rows = []
    for shape, g in ok.groupby("shape", sort=False):
        first = g.iloc[0]
        row = {"shape": shape, "M": first.M, "N": first.N, "K": first.K}
        peer = g[g.backend == PEER]
        row["peer"] = peer.config.iloc[0] if len(peer) else None
        row["peer_ms"] = float(peer.median_ms.min()) if len(peer) else np.nan
        bests = []
        for backend in BACKENDS:
            sub = g[g.backend == backend]
            if "sweep_ms" in sub and sub.sweep_ms.notna().any():
                sub = sub[sub.sweep_ms.notna()]  # the finals' times (tuner.run_finals), not the sweep's, compared
            if len(sub):
                r = _first_of_tied(sub)
                row[f"{backend}_config"], row[f"{backend}_ms"] = r.config, float(r.median_ms)
                bests.append(r)
            else:
                row[f"{backend}_config"], row[f"{backend}_ms"] = None, np.nan
        if not bests:
            continue
        best = _first_of_tied(pd.DataFrame(bests))
        best_ms = float(best.median_ms)
        row.update(winner=best.backend, winner_config=best.config, winner_ms=best_ms,
                   winner_tflops=float(best.tflops), vs_peer=row["peer_ms"] / best_ms,
                   pct_of_peak=float(best.get("pct_of_peak", np.nan)))
        rows.append(row)
    return pd.DataFrame(rows, columns=WINNER_COLUMNS)


# ------------------------------------------------------------------------------------------------ tables
def _fmt(x) -> str:
    if isinstance(x, (float, np.floating)):
        if math.isnan(x):
            return ""
        return f"{x:.4g}"
    return "" if x is None else str(x)


def markdown_table(df: pd.DataFrame) -> str:
    """A GitHub markdown table of ``df`` (no tabulate dependency); floats to 4 significant digits."""
    cols = list(df.columns)
    lines = ["| " + " | ".join(cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]
    for row in df.itertuples(index=False):
        lines.append("| " + " | ".join(_fmt(v).replace("|", "\\|") for v in row) + " |")
    return "\n".join(lines)


def html_table(df: pd.DataFrame) -> str:
    """An escaped HTML table of ``df``; floats to 4 significant digits."""
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in df.columns)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(_fmt(v))}</td>" for v in row) + "</tr>\n"
                   for row in df.itertuples(index=False))
    return f"<table>\n<thead><tr>{head}</tr></thead>\n<tbody>\n{body}</tbody>\n</table>"


_CSS = ("body{font-family:system-ui,sans-serif;margin:2em;color:#222}table{border-collapse:collapse;"
        "font-size:13px;margin:1em 0}th,td{border:1px solid #ccc;padding:3px 6px;text-align:right}"
        "th{background:#f0f0f0}td:first-child,th:first-child{text-align:left}img{max-width:100%;margin:1em 0}"
        ".note{color:#a33}")


def html_page(title: str, sections: list[tuple[str, str]], images: list[Path] = (), notes: list[str] = ()) -> str:
    """A self-contained HTML page: inline CSS, ``(heading, html)`` sections, PNGs embedded as data URIs."""
    parts = [f"<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>{html.escape(title)}"
             f"</title>\n<style>{_CSS}</style>\n</head>\n<body>\n<h1>{html.escape(title)}</h1>\n"]
    for note in notes:
        parts.append(f"<p class=\"note\">{html.escape(note)}</p>\n")
    for heading, body in sections:
        parts.append(f"<h2>{html.escape(heading)}</h2>\n{body}\n")
    for img in images:
        data = base64.b64encode(Path(img).read_bytes()).decode()
        parts.append(f"<figure><img alt=\"{html.escape(Path(img).stem)}\" src=\"data:image/png;base64,{data}\">"
                     f"<figcaption>{html.escape(Path(img).name)}</figcaption></figure>\n")
    parts.append("</body>\n</html>\n")
    return "".join(parts)


def _meta_lines(meta: dict) -> list[str]:
    facts = meta.get("facts") or {}
    lines = [f"{k}: {v}" for k, v in facts.items()]
    if meta.get("peak_tflops"):
        lines.append(f"measured peak ({meta.get('dtype')}): {meta['peak_tflops']:.1f} TFLOP/s (cuBLAS 8192^3)")
    for key in ("timer", "created"):
        if meta.get(key):
            lines.append(f"{key}: {meta[key]}")
    return lines


def _not_performance(meta_or_env: dict) -> list[str]:
    facts = meta_or_env.get("facts") or meta_or_env
    card = str(facts.get("gpu") or facts.get("card") or "")
    if card.startswith("cpu"):
        return ["No GPU: these numbers come from the Triton interpreter / CPU and say nothing about performance."]
    return []


# ------------------------------------------------------------------------------------------------ plots
def _pyplot():
    """matplotlib.pyplot on the Agg backend, or None when matplotlib is not installed."""
    try:
        import matplotlib

        matplotlib.use("Agg", force=True)
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    return plt


def _grouped_bars(ax, labels, series: dict[str, list[float]], colors: dict[str, str]):
    width = 0.8 / max(len(series), 1)
    x = np.arange(len(labels))
    for i, (name, values) in enumerate(series.items()):
        ax.bar(x + (i - (len(series) - 1) / 2) * width, values, width, label=name, color=colors.get(name))
    ax.set_xticks(x)
    ax.set_xticklabels(labels, rotation=30, ha="right")
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))


def plot_shape_bars(df: pd.DataFrame, path: Path, plt) -> Path | None:
    """Per shape: TFLOP/s of the best Triton config, the best CUDA config and the peer, side by side."""
    win = winners(df)
    if win.empty:
        return None
    series = {}
    for backend in BACKENDS:
        if win[f"{backend}_ms"].notna().any():
            series[backend] = list(2 * win.M * win.N * win.K / win[f"{backend}_ms"] / 1e9)
    series[PEER] = list(2 * win.M * win.N * win.K / win.peer_ms / 1e9)
    fig, ax = plt.subplots(figsize=(max(6, 1.1 * len(win) + 3), 4.2))
    peer_name = win.peer.dropna().iloc[0] if win.peer.notna().any() else PEER
    _grouped_bars(ax, list(win["shape"]), {(peer_name if k == PEER else f"tilewright {k} (best)"): v
                                        for k, v in series.items()},
                  {peer_name: BACKEND_COLORS[PEER], "tilewright triton (best)": BACKEND_COLORS["triton"],
                   "tilewright cuda (best)": BACKEND_COLORS["cuda"]})
    ax.set_ylabel("TFLOP/s")
    ax.set_title("GEMM: best tuned config per backend vs the peer (same run)")
    fig.tight_layout()
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return path


def heatmap_shape(df: pd.DataFrame) -> str | None:
    """The shape the heat map shows: the one with the most distinct Triton (BLOCK_M, BLOCK_N) tiles, largest first."""
    tr = df[(df.backend == "triton") & (df.status == "ok") & df.median_ms.notna()]
    if tr.empty:
        return None
    counts = tr.groupby("shape").apply(lambda g: (g[["block_m", "block_n"]].drop_duplicates().shape[0],
                                                  float(g.M.iloc[0]) * g.N.iloc[0] * g.K.iloc[0]),
                                       include_groups=False)
    return max(counts.index, key=lambda s: counts[s])


def plot_tile_heatmap(df: pd.DataFrame, shape: str, path: Path, plt) -> Path | None:
    """BLOCK_M x BLOCK_N heat map of the best Triton TFLOP/s per tile size (over stages, warps, orders) for ``shape``."""
    tr = df[(df.backend == "triton") & (df["shape"] == shape) & (df.status == "ok") & df.median_ms.notna()]
    if tr.empty:
        return None
    grid = tr.pivot_table(index="block_m", columns="block_n", values="tflops", aggfunc="max").sort_index()
    grid = grid.reindex(sorted(grid.columns), axis=1)
    fig, ax = plt.subplots(figsize=(1.3 * grid.shape[1] + 2.5, 1.0 * grid.shape[0] + 1.8))
    im = ax.imshow(grid.values, cmap="viridis", aspect="auto")
    ax.set_xticks(range(grid.shape[1]))
    ax.set_xticklabels([str(int(c)) for c in grid.columns])
    ax.set_yticks(range(grid.shape[0]))
    ax.set_yticklabels([str(int(i)) for i in grid.index])
    ax.set_xlabel("BLOCK_N")
    ax.set_ylabel("BLOCK_M")
    finite = grid.values[np.isfinite(grid.values)]
    mid = (finite.min() + finite.max()) / 2 if finite.size else 0
    for i in range(grid.shape[0]):
        for j in range(grid.shape[1]):
            v = grid.values[i, j]
            if np.isfinite(v):
                ax.text(j, i, f"{v:.4g}", ha="center", va="center", fontsize=9,
                        color="black" if v > mid else "white")
    fig.colorbar(im, ax=ax, label="TFLOP/s (best over stages/warps/order)")
    ax.set_title(f"Triton tiles, GEMM {shape}")
    fig.tight_layout()
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return path


def plot_tile_orders(df: pd.DataFrame, path: Path, plt) -> Path | None:
    """Per shape: best Triton TFLOP/s for each tile order, as % of that shape's best order."""
    tr = df[(df.backend == "triton") & (df.status == "ok") & df.median_ms.notna()]
    if tr.empty or tr.tile_order.nunique() < 2:
        return None
    best = tr.pivot_table(index="shape", columns="tile_order", values="tflops", aggfunc="max", sort=False)
    rel = 100 * best.div(best.max(axis=1), axis=0)
    rel = rel[[o for o in ORDER_COLORS if o in rel.columns] + [o for o in rel.columns if o not in ORDER_COLORS]]
    fig, ax = plt.subplots(figsize=(max(6, 1.1 * len(rel) + 3), 4.2))
    _grouped_bars(ax, list(rel.index), {o: list(rel[o]) for o in rel.columns}, ORDER_COLORS)
    finite = rel.values[np.isfinite(rel.values)]
    ax.set_ylim(max(0, math.floor(finite.min() / 5) * 5 - 5) if finite.size else 0, 101)
    ax.set_ylabel("% of the best tile order")
    ax.set_title("Triton GEMM: best config per tile order\n(missing bar: order pruned for the shape)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return path


def sweep_plots(sweep: Sweep, out_dir: Path) -> tuple[list[Path], str | None]:
    """All sweep plots into ``out_dir/plots``; ([], reason) when matplotlib is not installed."""
    plt = _pyplot()
    if plt is None:
        return [], f"matplotlib not installed ({BENCH_EXTRA}): plots skipped"
    plots = Path(out_dir) / "plots"
    plots.mkdir(parents=True, exist_ok=True)
    df = sweep.df
    made = [plot_shape_bars(df, plots / "shapes.png", plt)]
    shape = heatmap_shape(df)
    if shape:
        made.append(plot_tile_heatmap(df, shape, plots / f"tiles_{shape}.png", plt))
    made.append(plot_tile_orders(df, plots / "tile_orders.png", plt))
    return [p for p in made if p], None


# ------------------------------------------------------------------------------------------------ writers
def write_report(sweep: Sweep, out_dir, plots: bool = True) -> dict[str, Path]:
    """Render ``sweep`` into ``out_dir``: sweep.csv/json, winners.csv, report.md, report.html, plots/*.png."""
    out = Path(out_dir)
    paths = sweep.save(out)
    win = winners(sweep.df)
    paths["winners_csv"] = out / "winners.csv"
    win.to_csv(paths["winners_csv"], index=False)
    images, note = sweep_plots(sweep, out) if plots else ([], None)
    notes = _not_performance(sweep.meta) + ([note] if note else [])
    brief = ["shape", "backend", "config", "median_ms", "tflops", "pct_of_peer", "pct_of_peak", "status"]
    table = sweep.df.sort_values(["shape", "median_ms"], kind="stable")[brief]
    title = f"tilewright {sweep.meta.get('op', 'gemm')} autotune sweep - {(sweep.meta.get('facts') or {}).get('gpu', '')}"
    md = [f"# {title}", "", *[f"- {line}" for line in _meta_lines(sweep.meta)], "", *[f"> {n}" for n in notes], "",
          "## Winners per shape", "", "vs_peer = peer time / winner time (> 1: faster than the peer).", "",
          markdown_table(win), "", "## Every config", "", markdown_table(table), ""]
    md += [f"![{p.stem}](plots/{p.name})" for p in images]
    paths["report_md"] = out / "report.md"
    paths["report_md"].write_text("\n".join(md) + "\n")
    meta_html = "<ul>" + "".join(f"<li>{html.escape(x)}</li>" for x in _meta_lines(sweep.meta)) + "</ul>"
    page = html_page(title, [("Run", meta_html), ("Winners per shape", html_table(win)),
                             ("Every config", html_table(table))], images, notes)
    paths["report_html"] = out / "report.html"
    paths["report_html"].write_text(page)
    for p in images:
        paths[f"plot_{p.stem}"] = p
    return paths


def case_kind(op: str, case: str) -> str:
    """The kind of a bench case, for grouping ratios: gemm ``tag/bias`` -> bias, attention ``...|causal|bwd`` -> bwd,
    model ``llama-prefill|fwd+bwd`` -> fwd+bwd (and ``first_call``), rms_norm_linear ``tag-bwd`` -> bwd (else fwd)."""
    case = str(case)
    if op == "gemm" and "/" in case:
        return case.split("/", 1)[1]
    if op in ("attention", "model") and "|" in case:
        return case.rsplit("|", 1)[1]
    if op == "rms_norm_linear":
        return "bwd" if case.endswith("-bwd") else "fwd"
    return ""


def ratio_table(df: pd.DataFrame) -> pd.DataFrame:
    """Compact bench summary: per op and tilewright provider, geomean / min / max speedup over the peer, cases."""
    tw = df[df.provider.astype(str).str.startswith("tilewright") & df.speedup.notna() & (df.speedup > 0)].copy()
    if tw.empty:
        return pd.DataFrame(columns=["op", "kind", "provider", "peer", "geomean", "min", "max", "cases"])
    tw["kind"] = [case_kind(op, case) for op, case in zip(tw.op, tw.case)]
    out = tw.groupby(["op", "kind", "provider"], sort=False).agg(
        peer=("peer", lambda s: ", ".join(sorted(set(map(str, s.dropna()))))),
        geomean=("speedup", lambda s: float(np.exp(np.log(s).mean()))), min=("speedup", "min"),
        max=("speedup", "max"), cases=("speedup", "count"))
    return out.reset_index()


def plot_bench_speedups(df: pd.DataFrame, path: Path, plt, op: str) -> Path | None:
    """One op's speedup over its peer per case and tilewright provider (1.0 = parity line)."""
    tw = df[(df.op == op) & df.provider.astype(str).str.startswith("tilewright") & df.speedup.notna()]
    if tw.empty:
        return None
    piv = tw.pivot_table(index="case", columns="provider", values="speedup", sort=False)
    fig, ax = plt.subplots(figsize=(min(max(6, 0.45 * len(piv) + 3), 24), 4.5))
    colors = dict(zip(piv.columns, ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b"]))
    _grouped_bars(ax, list(piv.index), {c: list(piv[c]) for c in piv.columns}, colors)
    ax.axhline(1.0, color="black", lw=0.8, ls="--")
    peers = sorted(set(map(str, tw.peer.dropna())))
    # one peer fits the axis label; several (one per case kind) go to a caption line under the title
    ax.set_ylabel(f"speedup vs {peers[0]}" if len(peers) == 1 else "speedup vs the case's peer")
    if len(peers) > 1:
        ax.text(0.0, 1.01, "peers: " + ", ".join(peers), transform=ax.transAxes, fontsize=7, va="bottom")
    ax.set_title(f"{op}: tilewright vs the peer measured in the same run (> 1: faster)")
    for label in ax.get_xticklabels():
        label.set_fontsize(7)
    fig.tight_layout()
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return path


def write_bench_report(df: pd.DataFrame, env: dict, out_dir, plots: bool = True) -> dict[str, Path]:
    """Render ``tilewright bench`` results (bench/common.py long format) into ``out_dir``: one CSV per op,
    ``ratios.csv``, ``summary.md``, ``summary.html`` and ``plots/<op>_speedup.png``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {}
    for op, g in df.groupby("op", sort=False):
        paths[f"{op}_csv"] = out / f"{op}.csv"
        g.to_csv(paths[f"{op}_csv"], index=False)
    (out / "env.json").write_text(json.dumps(env, indent=1, default=str))
    ratios = ratio_table(df)
    paths["ratios_csv"] = out / "ratios.csv"
    ratios.to_csv(paths["ratios_csv"], index=False)
    images, notes = [], _not_performance(env)
    if plots:
        plt = _pyplot()
        if plt is None:
            notes.append(f"matplotlib not installed ({BENCH_EXTRA}): plots skipped")
        else:
            (out / "plots").mkdir(exist_ok=True)
            images = [p for op in df.op.unique()
                      if (p := plot_bench_speedups(df, out / "plots" / f"{op}_speedup.png", plt, op))]
    title = f"tilewright bench - {env.get('device', env.get('card', ''))}"
    cols = [c for c in ["op", "case", "provider", "median_ms", "tflops", "peer", "speedup"] if c in df]
    env_lines = [f"{k}: {v}" for k, v in env.items()]
    md = [f"# {title}", "", *[f"- {x}" for x in env_lines], "", *[f"> {n}" for n in notes], "",
          "## Ratios (speedup = peer time / tilewright time, > 1: faster)", "", markdown_table(ratios), "",
          "## Every case", "", markdown_table(df[cols]), ""] + [f"![{p.stem}](plots/{p.name})" for p in images]
    paths["summary_md"] = out / "summary.md"
    paths["summary_md"].write_text("\n".join(md) + "\n")
    env_html = "<ul>" + "".join(f"<li>{html.escape(x)}</li>" for x in env_lines) + "</ul>"
    paths["summary_html"] = out / "summary.html"
    paths["summary_html"].write_text(html_page(title, [("Run", env_html), ("Ratios", html_table(ratios)),
                                                       ("Every case", html_table(df[cols]))], images, notes))
    for p in images:
        paths[f"plot_{p.stem}"] = p
    return paths


def render(path, out_dir=None, plots: bool = True) -> dict[str, Path]:
    """Re-render a saved sweep (folder, sweep.csv) or bench results (folder of per-op CSVs, or one CSV).

    An input it cannot use (missing, not a CSV, other columns, text where numbers belong) raises FileNotFoundError or
    ValueError naming the file and what was expected; ``tilewright report`` prints that one line.
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such file or folder; expected {EITHER_EXPECTED}")
    sweep_csv = path / "sweep.csv" if path.is_dir() else path
    if sweep_csv.exists() and "config_json" in read_csv(sweep_csv, EITHER_EXPECTED).columns:
        sweep = Sweep.load(sweep_csv)
        return write_report(sweep, out_dir or sweep_csv.parent, plots)
    csvs = sorted(p for p in path.glob("*.csv") if p.name != "ratios.csv") if path.is_dir() else [path]
    frames = [(p, read_csv(p, EITHER_EXPECTED)) for p in csvs]
    frames = [(p, f) for p, f in frames if {"op", "provider", "speedup", "case"} <= set(f.columns)]
    if not frames:
        raise ValueError(f"{path}: neither a tune sweep nor bench results; expected {EITHER_EXPECTED}")
    for p, f in frames:
        check_numeric(f, p, ["median_ms", "tflops", "speedup"], BENCH_EXPECTED)
    folder = path if path.is_dir() else path.parent
    env_path = folder / "env.json"
    env = read_json(env_path, "the run's environment (a JSON object)") if env_path.exists() else {}
    return write_bench_report(pd.concat([f for _, f in frames], ignore_index=True), env, out_dir or folder, plots)
