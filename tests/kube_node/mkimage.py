#!/usr/bin/env python3
"""Builds a single-layer OCI image archive from a directory (no Docker, no registry):
the node suite's pause and busybox images (tests/kube_node/node.sh).

The archive holds an OCI image layout (oci-layout, index.json, blobs/sha256/...) and a
Docker-style manifest.json, so `ctr -n k8s.io images import ARCHIVE` accepts it and names
the image after --tag. (The leasekeeper image itself comes from scripts/image-archive.)

  mkimage.py --rootfs DIR --tag registry.k8s.io/pause:3.10 --entrypoint /pause \
             [--cmd ARG --cmd ARG ...] [--user 65535:65535] [--env K=V ...] [--workdir /] OUT.tar

Files in the layer are owned by 0:0 with mtime 0 unless --keep-owner; the result is
byte-for-byte reproducible for the same input.
"""
import argparse
import hashlib
import io
import json
import os
import tarfile


def layer_tar(rootfs, keep_owner):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        entries = []
        for dirpath, dirnames, filenames in os.walk(rootfs):
            dirnames.sort()
            for name in dirnames + sorted(filenames):
                entries.append(os.path.join(dirpath, name))
        for path in sorted(entries, key=lambda p: os.path.relpath(p, rootfs)):
            rel = os.path.relpath(path, rootfs)
            info = tar.gettarinfo(path, arcname=rel)
            info.mtime = 0
            if not keep_owner:
                info.uid = info.gid = 0
                info.uname = info.gname = ""
            if info.isreg():
                with open(path, "rb") as f:
                    tar.addfile(info, f)
            else:
                tar.addfile(info)
    return buf.getvalue()


def sha(data):
    return "sha256:" + hashlib.sha256(data).hexdigest()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rootfs", required=True)
    ap.add_argument("--tag", required=True, help="full image reference, e.g. localhost/x:1")
    ap.add_argument("--entrypoint", action="append", help="repeat once per argument")
    ap.add_argument("--cmd", action="append", help="repeat once per argument")
    ap.add_argument("--user", default="")
    ap.add_argument("--env", action="append", default=[])
    ap.add_argument("--workdir", default="/")
    ap.add_argument("--keep-owner", action="store_true")
    ap.add_argument("out")
    a = ap.parse_args()

    layer = layer_tar(a.rootfs, a.keep_owner)
    layer_digest = sha(layer)
    env = ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"] + a.env
    cfg = {"Env": env, "WorkingDir": a.workdir}
    if a.entrypoint:
        cfg["Entrypoint"] = a.entrypoint
    if a.cmd:
        cfg["Cmd"] = a.cmd
    if a.user:
        cfg["User"] = a.user
    config = {
        "architecture": "amd64",
        "os": "linux",
        "created": "1970-01-01T00:00:00Z",
        "config": cfg,
        "rootfs": {"type": "layers", "diff_ids": [layer_digest]},
        "history": [{"created": "1970-01-01T00:00:00Z", "created_by": "mkimage.py"}],
    }
    config_bytes = json.dumps(config, sort_keys=True, separators=(",", ":")).encode()
    config_digest = sha(config_bytes)
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {
            "mediaType": "application/vnd.oci.image.config.v1+json",
            "digest": config_digest,
            "size": len(config_bytes),
        },
        "layers": [{
            "mediaType": "application/vnd.oci.image.layer.v1.tar",
            "digest": layer_digest,
            "size": len(layer),
        }],
    }
    manifest_bytes = json.dumps(manifest, sort_keys=True, separators=(",", ":")).encode()
    manifest_digest = sha(manifest_bytes)
    index = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [{
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": manifest_digest,
            "size": len(manifest_bytes),
            "platform": {"architecture": "amd64", "os": "linux"},
            "annotations": {
                "io.containerd.image.name": a.tag,
                "org.opencontainers.image.ref.name": a.tag.rsplit(":", 1)[-1],
            },
        }],
    }
    docker_manifest = [{
        "Config": "blobs/sha256/" + config_digest[7:],
        "RepoTags": [a.tag],
        "Layers": ["blobs/sha256/" + layer_digest[7:]],
    }]

    files = [
        ("oci-layout", json.dumps({"imageLayoutVersion": "1.0.0"}).encode()),
        ("index.json", json.dumps(index, sort_keys=True).encode()),
        ("manifest.json", json.dumps(docker_manifest).encode()),
        ("blobs/sha256/" + config_digest[7:], config_bytes),
        ("blobs/sha256/" + layer_digest[7:], layer),
        ("blobs/sha256/" + manifest_digest[7:], manifest_bytes),
    ]
    with tarfile.open(a.out, "w", format=tarfile.PAX_FORMAT) as tar:
        for d in ("blobs", "blobs/sha256"):
            info = tarfile.TarInfo(d)
            info.type = tarfile.DIRTYPE
            info.mode = 0o755
            tar.addfile(info)
        for name, data in files:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = 0o644
            tar.addfile(info, io.BytesIO(data))
    print(f"{a.out}: {a.tag} manifest {manifest_digest} layer {len(layer)} bytes")


if __name__ == "__main__":
    main()
