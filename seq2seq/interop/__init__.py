"""Other toolkits: Hugging Face Marian and M2M100/NLLB import and export, CTranslate2."""
