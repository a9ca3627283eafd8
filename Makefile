PYTHON ?= python
export HF_DATASETS_OFFLINE ?= 1
export HF_HUB_OFFLINE ?= 1

.PHONY: install test lint demo clean-demo bench-train bench-translate bench-quality ablate-quality bench-data bench-ranks bench-gpu gpu-check

install:  ## editable install with dev tools; torch pinned to the local CPU wheel; the compiled decoder step where a C++ compiler is found (else one warning: the Python step runs)
	$(PYTHON) -m pip install -c constraints.txt -e ".[dev]"
	$(PYTHON) -m seq2seq.model.compiled_step

test:
	$(PYTHON) -m pytest

.PHONY: test-fast
test-fast:  ## the tests that neither train, serve nor decode a trained model: about a minute
	$(PYTHON) -m pytest -m "not slow" -q

lint:
	ruff check seq2seq tests scripts
	lint-imports

.PHONY: docs docs-reference
docs:  ## the docs/ pages as a site in site/; a broken link or a page missing from the nav fails
	$(PYTHON) -m mkdocs build --strict -d site

docs-reference:  ## regenerate docs/cli.md from the Typer app (tests/test_docs.py fails when it is stale)
	$(PYTHON) -m typer seq2seq.cli.app utils docs --name seq2seq --output docs/cli.md

demo:  ## generate the demo corpus, train, evaluate on the test split, translate a few lines
	seq2seq demo-data data/demo
	seq2seq train --config configs/demo.yaml --resume
	seq2seq evaluate --run runs/demo --split test
	printf 'I have three hundred and seventy-one cats.\nShe was born on the first of May nineteen eighty.\nThe book costs twelve euros and fifty cents.\n\nIt is a quarter past five.\nthree hundred and seventy-one\n' \
		| seq2seq translate --run runs/demo

clean-demo:
	rm -rf runs/demo data/demo

bench-train:  ## training throughput beside the HF Marian peer (needs ../shared)
	$(PYTHON) scripts/bench_train.py --seconds 120

bench-translate:  ## greedy and beam-4 decoding speed beside HF Marian and CTranslate2 (needs ../shared)
	$(PYTHON) scripts/bench_translate.py

bench-quality:  ## valid BLEU after 30 minutes of training each, beside the HF Marian peer (needs ../shared)
	$(PYTHON) scripts/bench_quality.py --minutes 30

ablate-quality:  ## one 8-minute run per setting changed: what moves BLEU at a fixed budget (needs ../shared)
	$(PYTHON) scripts/ablate_quality.py --minutes 8 --threads 1 --parallel 2

bench-ranks:  ## memory per rank: 1, 2 and 4 torchrun processes training from one memory-mapped corpus (needs ../shared)
	$(PYTHON) scripts/bench_ranks.py --ranks 1 2 4

bench-data:  ## preprocessing and iteration memory at 1M and 5M pairs
	$(PYTHON) scripts/bench_data.py --pairs 1000000 5000000

bench-gpu:  ## tokens/s and MFU of the base shape on synthetic batches (GPU)
	$(PYTHON) scripts/bench_gpu.py
	$(PYTHON) scripts/bench_gpu.py --compile

gpu-check:  ## on a CUDA machine: the `cuda` tests, then training (MFU) and decoding figures as one Markdown block; without CUDA, one line and exit 0
	$(PYTHON) scripts/gpu_check.py $(GPU_CHECK)

.PHONY: bench-distill
bench-distill:  ## teacher, baseline student, distilled student, then speed/BLEU/size rows (needs ../shared; ~1.5 h on 2 cores)
	bash scripts/bench_distill.sh

.PHONY: bench-serve
bench-serve:  ## seq2seq serve under 1, 8 and 64 clients, batching on and off, beside translate (needs ../shared)
	$(PYTHON) scripts/bench_serve.py
