"""What the page can ask the worker, one thin handler per message, all in terms of the library.

Every reply is `(json_text, buffers)`: the JSON envelope `{"ok": true, "result": ..., "io": ...}`
or `{"ok": false, "error": {"kind", "message"}}`, plus binary buffers (heatmap pixels and values)
the worker transfers to the page. A failed open leaves the previous checkpoint open and in use.

The page shows the numbers the CLI prints: a tensor's statistics come from `sample(tensor)` with
the library's default sample size, exactly as `tensorloupe stats FILE TENSOR --json` computes them.
"""

from __future__ import annotations

import json
import sys
import traceback

from .. import colormap, moe, npy, report
from ..opening import beside, shards
from .. import open as open_checkpoint
from ..errors import TensorloupeError, UsageError
from ..sampler.gather import dtype_of
from ..model import Checkpoint
from ..sampler.layout import costed
from ..sampler.sampling import EXACT_CHUNK_ELEMS, exact_stats_steps, grid_cost, sample_cost, values
from ..sampler.staged import StagedGrid, StagedSample
from ..jsonable import PREVIEW, json_number
from ..quant.logical import apply as dequantise
from ..adapters.pairs import layout_of
from ..sampler.stats import Stats
from ..source.remote import url_name
from . import beside_urls, blobs, files, remote
from .jobs import Job, Jobs
from .page_table import bytes_by_dtype, page_table
from .compare_ops import CompareOps
from .health_ops import HealthOps
from .model_ops import ModelOps
from .moe_ops import MoEOps
from .save_ops import SaveOps
from .views import heatmap_reply, staged_lattice

HISTOGRAM_BINS = 64
MAX_VALUES = 4096       # elements per `values` request


def exact_job(tensor, chunk_elems: int = EXACT_CHUNK_ELEMS) -> Job:
    """`exact_stats` one chunk per step (jobs.py): the page shows progress and may cancel."""
    dtype_of(tensor)  # refuse an unreadable tensor now, not at the first step
    return Job("exact statistics", exact_stats_steps(tensor, chunk_elems), tensor.numel, state=Stats(),
               result=lambda stats: {"stats": stats.to_json()})


class Session(MoEOps, HealthOps, CompareOps, ModelOps, SaveOps):
    """The worker's state: one open checkpoint, its MoE structure and analysis, running jobs;
    a second checkpoint to compare with (compare_ops); its architecture and tokenizer (model_ops)."""

    def __init__(self) -> None:
        self.checkpoint: Checkpoint | None = None
        self._moe = None
        self.analysis = None          # the last expert analysis, as measured (moe_ops)
        self.jobs = Jobs()

    @property
    def moe(self) -> moe.MoE | None:
        """The open checkpoint's MoE structure, found when first needed (model_details, the
        Experts tab): not before the tree is drawn (39,120 names take ~0.3 s in the browser)."""
        if self._moe is None and self.checkpoint is not None:
            try:
                self._moe = moe.detect(self.checkpoint, self.config)
            except TensorloupeError as e:
                self._moe = moe.MoE(False, f"MoE detection failed: {e}")
        return self._moe

    # --- dispatch ----------------------------------------------------------------------------

    def handle(self, op: str, args: dict):
        handler = getattr(self, f"op_{op}", None)
        if handler is None:
            raise UsageError(f"unknown request {op!r}")
        return handler(args)

    def io(self) -> dict | None:
        ckpt = self.checkpoint
        if ckpt is None:
            return None
        # batches: vectored reads served all at once (JSPI; 0 where reads go one at a time), of
        # which prefetches were started before they were read (the expert analysis' next layer)
        roots = [s.root() for s in ckpt.sources]
        return {"bytes_read": ckpt.bytes_read(), "reads": ckpt.reads(), "size": ckpt.size,
                "batches": sum(getattr(r, "batches", 0) for r in roots),
                "prefetches": sum(getattr(r, "prefetches", 0) for r in roots)}

    def current(self) -> Checkpoint:
        if self.checkpoint is None:
            raise UsageError("no checkpoint is open")
        return self.checkpoint

    # --- opening -----------------------------------------------------------------------------

    def job_names(self) -> list[str]:
        """The requests that are jobs (jobs.py): every `op_<name>_start`."""
        return sorted(name[3:-6] for name in dir(self) if name.startswith("op_") and name.endswith("_start"))

    def op_hello(self, args):
        return {"python": sys.version.split()[0], "palette_levels": colormap.GRADIENT_LEVELS,
                "jobs": self.job_names(),
                "specials": {"nan": colormap.NAN_INDEX, "posinf": colormap.POSINF_INDEX,
                             "neginf": colormap.NEGINF_INDEX}}, [colormap.palette_rgba()]

    def op_open_demo(self, args):
        """The demo model: the copy build.py ships in dist/ (`path`: the worker mounted it), read
        in place like any file; built here only when the page could not fetch it (~1-3 s in the
        browser, the wait every visit had before it was shipped)."""
        from .. import synthetic
        if args.get("path"):
            return self._adopt(open_checkpoint(blobs.open_target(args["path"], synthetic.FILE_NAME)))
        return self._adopt(open_checkpoint(synthetic.demo_bytes(), name=synthetic.FILE_NAME))

    def op_group(self, args):
        """Dropped files, a folder's files or URLs as the entries to list (web/files.py)."""
        return {"entries": files.group(files.given(args.get("files", [])))}, []

    def op_open(self, args):
        """One file (`path`) or the files of one checkpoint (`paths`: shards, index), with the
        model's config.json (`config`) if it was given too."""
        config = self._config(args.get("config"), files.load_config)
        # Mounted browser Files: vectored reads are all their slices at once (web/blobs.py).
        if "paths" in args:
            paths = list(args["paths"])
            return self._adopt(open_checkpoint(blobs.open_target(paths)), *config, args.get("config"),
                               paths)
        return self._adopt(open_checkpoint(blobs.open_target(args["path"], args.get("name"))),
                           *config, args.get("config"), [args["path"]])

    def op_open_url(self, args):
        """URLs read by Range requests; `probes` are the worker's first answers (web/remote.py),
        or, with JSPI, awaited here one by one as they come in (remote.worker_probe): each shard's
        header is read while the others are still on their way."""
        urls, probes = list(args.get("urls", [])), args.get("probes")
        if not urls:
            raise UsageError("no URL was given")

        index = beside_urls.pipeline_index(urls)   # a diffusers folder: its files found first
        if index is not None:
            from ..opening import hubfiles as hub   # its shard_urls: an index names its shards
            urls, found = beside_urls.pipeline_files(index, beside_urls.probe_all, remote.open_url,
                                                     hub.shard_urls)
            probes = {**(probes or {}), **found}

        def probe(url):
            return remote.probe_of(probes, url)
        config = self._config(args.get("config"), lambda url: remote.read_config(url, probe(url)))
        sources, read, failed = [None] * len(urls), {}, {}
        # In the order shards.open_all reads them (the index first: the worker fetched it first);
        # failures are kept and raised as the plain open would raise them (the first URL that
        # cannot be opened, in the order given; then open_all's own order).
        for i in sorted(range(len(urls)), key=lambda i: not shards.is_index(urls[i])):
            try:
                sources[i] = remote.open_url(urls[i], probe(urls[i]))
                read[sources[i]] = shards.read_one(sources[i])
            except TensorloupeError as e:
                failed[sources[i] or i] = e
        opened = [s for s in sources if s is not None]
        if len(opened) < len(urls):
            for source in opened:
                source.close()
            raise failed[min(k for k in failed if isinstance(k, int))]

        def known(source):
            if source in failed:
                raise failed[source]
            return read[source]
        ckpt = shards.open_all(opened, known)
        if index is not None:
            beside_urls.forget(probes)
        where = beside_urls.adapter_config_url(urls, (t.name for t in ckpt.tensors))
        if where is not None:    # a PEFT adapter: its adapter_config.json beside the URL
            from .. import adapters
            found, why = beside_urls.read_adapter_config(where, beside_urls.probe_all, remote.open_url)
            if why:
                ckpt.warnings.append(why)
            adapters.apply(ckpt, found, url_name(where))
        return self._adopt(ckpt, *config, args.get("config"))

    @staticmethod
    def _config(where, load) -> tuple[dict | None, str | None]:
        """(config, None) or (None, a warning): a broken config.json does not stop the model
        (beside.config_for, the CLI's rule, with the page's reader)."""
        found = beside.config_for([], where, load)
        return found.data, (f"{found.problem} (top-k is not taken from it)" if found.problem else None)

    def _adopt(self, ckpt: Checkpoint, config: dict | None = None, config_warning: str | None = None,
               config_where: str | None = None, paths: list[str] | None = None):
        """Make a successfully opened checkpoint current (only now is the old one closed)."""
        if config_warning:
            ckpt.warnings.append(config_warning)
        dequantise(ckpt, config, config_where or "config.json")   # its quantization_config, if any
        if "quantisation" not in ckpt.extras and paths:     # else a ModelOpt hf_quant_config.json beside
            found = beside.quantisation_for([p for p in paths if isinstance(p, str)])
            if found.problem:
                ckpt.warnings.append(f"{found.problem} (its quantisation is not applied)")
            dequantise(ckpt, found.data, found.where)
        if layout_of(t.name for t in ckpt.tensors):   # a LoRA adapter: ΔW (adapters/), with
            from .. import adapters                     # the adapter_config.json dropped beside it
            adapters.adopt(ckpt, [p for p in paths or [] if isinstance(p, str)])
            adapters.apply(ckpt, None)   # by URL, no config is fetched: said, factors as stored
        if self.checkpoint is not None:
            self.checkpoint.close()
        self.checkpoint, self._moe, self.analysis = ckpt, None, None
        self.staged_sample = self.staged_grid = None
        self.saving = None                      # a save of the old one ends (save_ops)
        self.config, self.config_where = config, config_where or "config.json"
        self.opened_paths = [p for p in paths or [] if isinstance(p, str)]   # local: tokenizer.json beside
        self.jobs.clear()
        return self.model_payload(), []

    def model_payload(self) -> dict:
        """What the page needs to draw the tree and the file's facts: `report.checkpoint_json`
        (what `inspect --json` prints, metadata and extras bounded) with its tensors as a compact
        table (page_table.py), plus bytes by dtype and where its tokenizer is. The MoE structure
        and the architecture block follow in model_details, which the page asks for next."""
        ckpt = self.current()
        out = report.checkpoint_json(ckpt, PREVIEW, tensors=False)
        out["tensors"] = page_table(ckpt)
        out["metadata"] = report.shown_metadata(ckpt, PREVIEW)   # torch: no tensor list again
        out["bytes_by_dtype"] = bytes_by_dtype(out["tensors"])
        out["tokenizer"] = self.tokenizer_payload()
        return out

    def op_model_details(self, args):
        """The rest of the model payload: the MoE structure (moe.detect) and the architecture and
        memory block (model_ops: "architecture" and "memory", as in inspect --json)."""
        found = self.moe
        return {"file": self.current().name, "moe": found.to_json() if found else None,
                **self.architecture_payload()}, []

    # --- one tensor --------------------------------------------------------------------------

    # A first look (sampler/staged.py) keeps what it read here, for the request that refines it; the
    # page asks for that next, so one of each is enough (another tensor or view replaces it).
    staged_sample: StagedSample | None = None
    staged_grid: StagedGrid | None = None

    def op_tensor(self, args):
        """Descriptor, sampled statistics and histogram: what the tensor view shows first.
        `first_look`: from every 8th of the sample's windows when it has several (the
        reply says `first_look`; the page then asks again without it for the whole sample)."""
        t = self.current().tensor(args["name"])
        out = {}
        if t.problem is None:
            staged = self.staged_sample
            if args.get("first_look") or staged is None or staged.tensor is not t:
                staged = StagedSample(t)
            s = args.get("first_look") and staged.first_look()
            self.staged_sample = staged if s else None
            s = s or staged.sample()
            out["sample"] = s.to_json()
            if costed(t):   # the whole sample's bytes, stated by the plan it reads (a first look: part of them)
                out["sample"]["cost_bytes"] = sample_cost(t)
            out["histogram"] = s.histogram(int(args.get("bins", HISTOGRAM_BINS))).to_json()
        out["tensor"] = t.to_json()  # after sampling: a torch storage's offset is known by then
        return out, []

    def op_heatmap(self, args):
        """A lattice over (a region of) a 2-D view: RGBA pixels and float64 values, row-major.
        `first_look`: every 8th row and column (sampler/staged.py) when the lattice's rows are many separate reads
        (the reply says `first_look`; the page then asks again without it)."""
        t = self.current().tensor(args["name"])
        staged = staged_lattice(t, args)
        if not args.get("first_look") and self.staged_grid is not None and self.staged_grid.key == staged.key:
            staged = self.staged_grid
        g = args.get("first_look") and staged.first_look()
        self.staged_grid = staged if g else None
        g = g or staged.grid()
        region = staged.region      # the request was parsed once, by staged_lattice
        scale = args.get("scale")
        if not isinstance(scale, (int, float)) or not scale > 0:
            scale = g.amax
        result, buffers = heatmap_reply(g, region, scale)
        if costed(t):   # the whole lattice's bytes, stated by the plan it reads
            result["cost_bytes"] = grid_cost(t, staged.plan)
        return result, buffers

    def op_values(self, args):
        t = self.current().tensor(args["name"])
        start, count = int(args.get("start", 0)), min(MAX_VALUES, int(args.get("count", 1)))
        return {"start": start, "values": [json_number(v) for v in values(t, start, count)]}, []

    # --- the Hub shortcut (hub.py): what the worker fetches for `org/model[@rev]` -------------

    def op_hub_plan(self, args):
        """The URLs to try for a Hub model, or null when `text` is an ordinary URL."""
        from ..opening import hubfiles as hub   # urllib.parse: slow to import in Pyodide; Hub only
        return hub.plan(str(args.get("text", "")), str(args.get("hub") or hub.HUB)), []

    def op_hub_shards(self, args):
        from ..opening import hubfiles as hub
        return {"urls": hub.shard_urls(str(args["index"]), str(args["text"]))}, []

    # --- export: files the page offers for download ----------------------------------------

    def op_export_npy(self, args):
        """The tensor's values (or, with `region`, the elements of that tile of the view) as a
        .npy file written by the library (npy.py): the bytes travel as a buffer."""
        t = self.current().tensor(args["name"])
        if args.get("region"):
            plane = tuple(int(v) for v in args["plane"]) if args.get("plane") else None
            index = {int(k): int(v) for k, v in (args.get("index") or {}).items()}
            out = npy.export_tile(t, tuple(int(v) for v in args["region"]), plane, index or None)
        else:
            out = npy.export_tensor(t)
        stem = "".join(c if c.isalnum() or c in "._-" else "_" for c in t.name)
        return {"file": f"{stem}{'.tile' if args.get('region') else ''}.npy", "descr": out.descr,
                "shape": list(out.shape), "exact_dtype": out.exact_dtype, "bytes": len(out.data)}, [out.data]

    def op_export_table(self, args):
        fmt = args.get("format", "csv")
        if fmt not in ("csv", "json"):
            raise UsageError(f"the table exports as csv or json, not {fmt!r}")
        ckpt = self.current()
        return {"file": f"{ckpt.name}.tensors.{fmt}", "text": report.tensor_table(ckpt, fmt)}, []

    # --- jobs (jobs.py): long work in steps, so that the worker can take a cancel between them ---

    def op_exact_start(self, args):
        return self.jobs.start(exact_job(self.current().tensor(args["name"]))), []

    def op_job_step(self, args):
        return self.jobs.step(int(args["job"])), []

    def op_job_cancel(self, args):
        return self.jobs.cancel(int(args["job"])), []


session = Session()


def dispatch(op: str, args_json: str = "{}") -> tuple[str, list[bytes]]:
    """The worker's single entry point. Never raises: every failure becomes a readable message."""
    try:
        args = json.loads(args_json) if args_json else {}
        result, buffers = session.handle(op, args)
        envelope = {"ok": True, "result": result, "io": session.io()}
        return json.dumps(envelope, allow_nan=False, separators=(",", ":")), buffers
    except TensorloupeError as e:
        error = {"kind": type(e).__name__, "message": str(e)}
    except MemoryError:
        error = {"kind": "MemoryError", "message": "out of memory (the browser tab has at most ~4 GB)"}
    except Exception as e:  # a bug of ours: say so readably and keep the worker serving
        error = {"kind": "InternalError", "message": f"internal error: {type(e).__name__}: {e}",
                 "detail": traceback.format_exc(limit=8)}
    return json.dumps({"ok": False, "error": error, "io": session.io()}), []
