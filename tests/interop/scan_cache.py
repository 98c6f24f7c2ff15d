#!/usr/bin/env python3
"""Scans a Hugging Face cache with huggingface_hub.scan_cache_dir and prints what it recognised as JSON.

    python3 tests/interop/scan_cache.py CACHE_DIR

tests/hub_cache.rs (`the_cache_layout_is_the_one_huggingface_hub_scans`) builds a cache with the helper
nnlint's own cache tests use, runs this script on it with the interop venv's python (run.sh passes it
as NNLINT_INTEROP_PY) and compares the repos, revisions, refs and files with what it wrote. Nothing is
judged here: huggingface_hub's reading of the layout is printed as it is, warnings included.
"""
import json
import os
import sys

import huggingface_hub
from huggingface_hub import scan_cache_dir


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    root = os.path.realpath(sys.argv[1])
    info = scan_cache_dir(root)

    def rel(p) -> str:
        return os.path.relpath(os.path.realpath(str(p)), root)

    repos = []
    for repo in sorted(info.repos, key=lambda r: r.repo_id):
        revisions = []
        for rev in sorted(repo.revisions, key=lambda r: r.commit_hash):
            files = {}
            for f in rev.files:
                files[os.path.relpath(str(f.file_path), str(rev.snapshot_path))] = {
                    "blob": rel(f.blob_path),
                    "size": f.size_on_disk,
                }
            revisions.append({
                "commit_hash": rev.commit_hash,
                "refs": sorted(rev.refs),
                "snapshot": rel(rev.snapshot_path),
                "files": files,
            })
        repos.append({
            "repo_id": repo.repo_id,
            "repo_type": repo.repo_type,
            "nb_files": repo.nb_files,
            "size_on_disk": repo.size_on_disk,
            "refs": sorted(repo.refs),
            "revisions": revisions,
        })
    print(json.dumps({
        "huggingface_hub": huggingface_hub.__version__,
        "repos": repos,
        "warnings": [str(w) for w in info.warnings],
    }, indent=1, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
