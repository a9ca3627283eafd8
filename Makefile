PYTHON ?= python
export HF_DATASETS_OFFLINE ?= 1
export HF_HUB_OFFLINE ?= 1

.PHONY: install test lint demo clean-demo

install:  ## editable install with dev tools; torch pinned to the local CPU wheel
	$(PYTHON) -m pip install -c constraints.txt -e ".[dev]"

test:
	$(PYTHON) -m pytest

lint:
	ruff check seq2seq tests scripts

demo:  ## generate the demo corpus, train, evaluate on the test split, translate a few lines
	seq2seq demo-data data/demo
	seq2seq train --config configs/demo.yaml --resume
	seq2seq evaluate --run runs/demo --split test
	printf 'I have three hundred and seventy-one cats.\nShe was born on the first of May nineteen eighty.\nThe book costs twelve euros and fifty cents.\n\nIt is a quarter past five.\n' \
		| seq2seq translate --run runs/demo

clean-demo:
	rm -rf runs/demo data/demo
