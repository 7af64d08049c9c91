"""A weighted mixture on the offline Bible corpus: Spanish (Reina-Valera 1909) from two English
Bibles, the World English Bible 7 parts to the King James Version's 3, with the quickstart's model.

Each example of a step's batch is drawn from WEB->es with probability 0.7 and from KJV->es with 0.3
(tfm/data/mixture.py); both corpora hold the same ~30,000 verses, so KJV's epochs run at 3/7 of
WEB's. The vocabulary is trained on their text in the same 7:3 proportion. The dev evaluations are
the WEB dev verses ('dev', the section's own dataset) and the KJV side of the same verses ('kjv').
An ablation of the weights is a sweep grid:

  ./launch.sh sweep --config configs/bible_mixture.py --grid data.mixture_weights=1:1,7:3,9:1 --seeds 2 --root runs/mixture

No download: both corpora are built from the Debian packages sword-text-web, sword-text-kjv and
sword-text-sparv.
"""

from configs import quickstart


def get_config():
  c = quickstart.get_config()
  c.data.update(
      dataset="bible_translate/web-sparv",  # the evaluated dataset ('dev') and the first source
      mixture=({"name": "web", "weight": 7},
               {"name": "kjv", "dataset": "bible_translate/kjv-sparv", "weight": 3}),
      eval_sets={"dev": "dev", "kjv": {"source": "kjv"}})
  return c
