"""OCI images of capsules: one builder (`mur image build`, and `mur deploy --docker`), push, save, load.

    from mur.image import build_image, BuildOptions, save_image, load_image, push_image, pull_image

See docs/image.md.
"""

from mur.image.build import BASE_IMAGE, BuildOptions, BuildResult, build_image
from mur.image.transfer import SavedArchive, load_image, pull_image, push_image, save_image
from mur.image.types import QUIET, ImageRef, Reporter

__all__ = [
    "BASE_IMAGE", "BuildOptions", "BuildResult", "ImageRef", "QUIET", "Reporter", "SavedArchive",
    "build_image", "load_image", "pull_image", "push_image", "save_image",
]
