"""Trained tfm models written in other libraries' formats: `tfm export` (tfm/commands/export.py).

marian.py: an encoder-decoder as Hugging Face transformers' MarianMTModel (and through it
CTranslate2's converter); refusals.py: the configs that class cannot hold, refused by key.
"""
