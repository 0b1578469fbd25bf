"""Write a rehearsal's stand-ins (fake data, feature weights, pretrained reference, VAE) where its
config says, each once: a stand-in already on disk with the same recipe is kept, so a second
``rehearse`` rewrites nothing and Snakemake reruns nothing.

The recipe of every stand-in (what it is, its sizes, its seed) is recorded in
``<rehearsal>/stand_ins.json`` (the shared Inception files: ``<base>/inception/stand_ins.json``);
a different recipe writes the stand-in again.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any, Callable, Mapping

from timestep_lab.artifacts.io import atomic_write_json
from timestep_lab.rehearsal.fake_data import FAKE_DATA
from timestep_lab.rehearsal.fake_weights import FAKE_REFERENCES, write_inception, write_rehearsal_cnn
from timestep_lab.rehearsal.latent import VAE_STAND_IN, write_vae
from timestep_lab.rehearsal.paths import RehearsalPaths
from timestep_lab.rehearsal.scale import SIZES, Sizes
from timestep_lab.workflow.spaces import pixel_study, reference_in_pixels

__all__ = ["write_stand_ins", "image_channels"]

SEED = 0
RECIPE_FILE = "stand_ins.json"


def image_channels(dataset: str) -> int:
    return 1 if dataset == "digits" else 3


def _once(root: Path, dest: str, recipe: Mapping[str, Any], record: Path, write: Callable[[Path], Any],
          done: list[str]) -> None:
    """``write(root / dest)`` unless it exists with this ``recipe`` (recorded in ``record``)."""
    path = root / dest
    recipes = json.loads(record.read_text()) if record.is_file() else {}
    if path.exists() and recipes.get(dest) == recipe:
        done.append(f"kept {dest}")
        return
    if path.is_dir():
        shutil.rmtree(path)
    elif path.exists():
        path.unlink()
    path.parent.mkdir(parents=True, exist_ok=True)
    write(path)
    recipes[dest] = dict(recipe)
    record.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_json(record, recipes)
    done.append(f"wrote {dest}")


def write_stand_ins(rehearsal: Mapping[str, Any], paths: RehearsalPaths, root: Path,
                    sizes: Sizes = SIZES) -> list[str]:
    """Every stand-in the rehearsal config ``rehearsal`` (:func:`.scale.rehearsal_study`) reads,
    under ``root``; returns one line per stand-in ("wrote ..." or "kept ...")."""
    done: list[str] = []
    data, ev, ref, base = rehearsal["data"], rehearsal["evaluation"], rehearsal["reference"], rehearsal["base"]
    record = root / paths.root / RECIPE_FILE
    channels = image_channels(data["dataset"])
    writer = FAKE_DATA[data["dataset"]]
    if writer is not None and data.get("source"):
        recipe = {"data": data["dataset"], "train": sizes.train_images, "test": sizes.test_images, "seed": SEED}
        _once(root, data["source"], recipe, record,
              lambda p: writer(p, sizes.train_images, sizes.test_images, SEED), done)
    if ev["extractor"] == "inception-v3" and ev.get("weights"):
        _once(root, ev["weights"], {"inception-v3": "random, both libraries' formats", "seed": SEED},
              root / paths.inception / RECIPE_FILE, lambda p: write_inception(p, SEED), done)
    elif ev["extractor"] == "rehearsal-cnn":
        _once(root, ev["weights"], {"rehearsal-cnn": channels, "seed": SEED}, record,
              lambda p: write_rehearsal_cnn(p, channels, seed=SEED), done)
    if (rehearsal.get("latent") or {}).get("vae"):  # a latent study's VAE: a tiny random AutoencoderKL folder
        _once(root, rehearsal["latent"]["vae"], {"vae": VAE_STAND_IN, "seed": SEED}, record,
              lambda p: write_vae(p, SEED), done)
    if reference_in_pixels(rehearsal):  # the pixel reference is built as the pixel runs' network
        base = pixel_study(rehearsal)["base"]
    if ref.get("pretrained"):
        res = data.get("resolution") or {"digits": 8}.get(data["dataset"], 32)
        recipe = {"reference": ref["format"], "resolution": res, "channels": channels,
                  "model": base.get("model"), "seed": SEED}
        _once(root, ref["pretrained"], recipe, record,
              lambda p: FAKE_REFERENCES[ref["format"]](p, base, res, channels, SEED), done)
    return done
