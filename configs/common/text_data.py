"""The text data of the LiBai NLP configs: real English prose indexed by LiBai's own preprocess tool, built on
first use under ``text_data.root`` (``libai_ext.data.text_data``; ``tools/make_text_data.py`` builds it ahead).

``text_data.libai_source``: where LiBai's preprocess tool comes from (a LiBai source folder or archive; null:
$LIBAI_MAIN_ARCHIVE, else LiBai main's archive where the Makefile looks for one, beside this checkout or beside the
local checkout it was cloned from, else the copy in ~/.cache/libai_ext/ ($XDG_CACHE_HOME if set), which is
downloaded once from GitHub at the Makefile's commit when there is none).  ``data_file(name)``: a file of it (``libai_ext.data.text_data.FILES``),
resolved when the config is instantiated, so ``text_data.root=...`` on the command line moves every file.
"""
from libai.config import LazyCall
from omegaconf import OmegaConf

from libai_ext.data.text_data import text_data_file

text_data = OmegaConf.create(dict(root="./data/libai_text", libai_source=None))


def data_file(name):
    return LazyCall(text_data_file)(root="${text_data.root}", name=name, libai_source="${text_data.libai_source}")
