#!/usr/bin/env python3
"""Checks that a model folder rlpt wrote (model::save_pretrained) loads in Hugging Face
transformers and gives rlpt's logits.

usage: check_hf_export.py MODEL_DIR RLPT_LOGITS_JSON
  RLPT_LOGITS_JSON: {"input_ids": [...], "logits": [[...], ...] (rlpt's float32 forward),
                     "bound": B (the largest |difference| allowed: float32 rounding, derived by
                     the caller with tests/unit/test_tolerance.h), "rope_theta": T and
                     "architecture": A (what rlpt meant)}
transformers loads the folder as it is (AutoModelForCausalLM, eager attention and experts) and computes the
logits in float64 from the saved weights. Fails (exit 1) when
  * the architecture or rope_theta transformers read is not what rlpt meant, or
  * any logit differs by more than B, or
  * the check could not see a wrong rope_theta: the same weights with rope_theta 10000 must give
    logits further than B from rlpt's (so the caller picks a theta other than 10000).
Exit 77 (skip) when this Python has no transformers (scripts/setup.sh installs it into .venv).
"""
import json
import sys

try:
    import torch
    import transformers
except ImportError as e:
    print(f"check_hf_export: skipped, {e} (scripts/setup.sh installs transformers into .venv)")
    sys.exit(77)


def theta_of(config):
    params = getattr(config, "rope_parameters", None) or {}
    return params.get("rope_theta", getattr(config, "rope_theta", None))


def logits_of(model_dir, ids, theta=None):
    config = transformers.AutoConfig.from_pretrained(model_dir)
    if theta is not None:
        config.rope_parameters = {**(config.rope_parameters or {}), "rope_theta": theta}
    # Mixture-of-experts models: the experts' eager loop (the grouped-GEMM kernels have no float64).
    extra = {"experts_implementation": "eager"} if getattr(config, "num_experts", 0) else {}
    model = transformers.AutoModelForCausalLM.from_pretrained(model_dir, config=config, dtype=torch.float64,
                                                              attn_implementation="eager", **extra)
    model.eval()
    with torch.no_grad():
        return model(input_ids=torch.tensor([ids])).logits[0], model.config


def main():
    model_dir, rlpt_json = sys.argv[1], sys.argv[2]
    want = json.load(open(rlpt_json))
    ids, bound = want["input_ids"], want["bound"]
    rlpt_logits = torch.tensor(want["logits"], dtype=torch.float64)
    got, config = logits_of(model_dir, ids)
    problems = []
    if config.architectures != [want["architecture"]]:
        problems.append(f"transformers read architectures {config.architectures}, rlpt wrote {want['architecture']}")
    theta = theta_of(config)
    if theta != want["rope_theta"]:
        problems.append(f"transformers read rope_theta {theta}, rlpt meant {want['rope_theta']}")
    diff = (got - rlpt_logits).abs().max().item()
    if not diff <= bound:
        problems.append(f"max |logit difference| {diff:.3g} > bound {bound:.3g}")
    wrong, _ = logits_of(model_dir, ids, theta=10000.0)
    wrong_diff = (wrong - rlpt_logits).abs().max().item()
    if want["rope_theta"] == 10000.0 or not wrong_diff > bound:
        problems.append(f"a wrong rope_theta (10000) is within the bound ({wrong_diff:.3g}): the check cannot see it")
    print(f"check_hf_export: {model_dir}: {config.architectures[0]}, rope_theta {theta}, max |logit difference| "
          f"{diff:.3g} (bound {bound:.3g}; with rope_theta 10000: {wrong_diff:.3g})")
    for p in problems:
        print(f"check_hf_export: FAILED: {p}")
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
