"""Packaging: the repository's top-level folders install as subpackages of ``trainsim``.

``operators/``, ``topology/``, ``calibration/``, ``sim/`` and ``scenarios/`` (with every
subpackage, found automatically) become ``trainsim.operators`` ... ``trainsim.scenarios``
through setuptools' ``package_dir`` mapping; nothing else lands at the top level of
site-packages. pyproject.toml cannot express a found-and-renamed package list, hence this
file (docs/architecture.md).
"""

from setuptools import find_packages, setup

SUBPACKAGES = ("operators", "topology", "calibration", "sim", "scenarios")

packages = ["trainsim"]
package_dir = {"trainsim": "trainsim"}
for top in SUBPACKAGES:
    package_dir[f"trainsim.{top}"] = top
    packages += [f"trainsim.{name}" for name in find_packages(include=[top, f"{top}.*"])]

setup(
    packages=packages,
    package_dir=package_dir,
    package_data={
        "trainsim": ["py.typed"],
        "trainsim.scenarios": ["bundled/*.yaml"],
        "trainsim.calibration": ["profiles/*/*.csv", "profiles/*/*.json", "profiles/*.json"],
    },
    include_package_data=False,
)
