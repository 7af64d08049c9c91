"""Decoding: beam search (paper section 6.1), greedy decoding and sampling over a cached step fn."""

from tfm.decode.beam import (BeamSearchResult, beam_search, beam_search_result, gather_beams,
                             length_penalty, tile_beams)
from tfm.decode.common import input_length_limits
from tfm.decode.sampling import DecodeResult, greedy, process_logits, sample

__all__ = [
    "BeamSearchResult", "DecodeResult", "beam_search", "beam_search_result", "gather_beams",
    "greedy", "input_length_limits", "length_penalty", "process_logits", "sample", "tile_beams",
]
