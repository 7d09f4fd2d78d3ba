#!/usr/bin/env python3
"""Write one OCI image (layout directory and oci-archive) from a root filesystem directory.

Used by scripts/image. No container daemon, no registry and no third-party module: one layer,
a tar of ROOTFS with every entry owned by root (0:0), sorted, its times set to SOURCE_DATE_EPOCH,
gzip-compressed without a name or time in its header, so the same files give the same digest.
Hand-written rather than umoci/buildah because those need apt packages (and buildah a storage
driver) on every machine that builds, and the format needed here is small (OCI image-spec v1.1:
oci-layout, index.json, blobs/sha256/*).

Prints one JSON line: the reference, the manifest digest and the compressed size (layer +
config + manifest bytes, what a registry stores and a node pulls).
"""

import argparse
import gzip
import hashlib
import io
import json
import os
import shutil
import sys
import tarfile


def _tar_filter(epoch):
    def apply(info):
        info.uid = info.gid = 0
        info.uname = info.gname = "root"
        info.mtime = epoch
        return info

    return apply


def layer_tar(rootfs, epoch):
    """The uncompressed layer: ROOTFS's entries, sorted, as root, at a fixed time."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        entries = []
        for parent, dirs, files in os.walk(rootfs):
            dirs.sort()
            for name in sorted(dirs + files):
                entries.append(os.path.join(parent, name))
        for path in sorted(entries, key=lambda p: os.path.relpath(p, rootfs)):
            arcname = os.path.relpath(path, rootfs)
            tar.add(path, arcname=arcname, recursive=False, filter=_tar_filter(epoch))
    return raw.getvalue()


def write_blob(layout, data):
    digest = hashlib.sha256(data).hexdigest()
    path = os.path.join(layout, "blobs", "sha256", digest)
    with open(path, "wb") as out:
        out.write(data)
    return "sha256:" + digest


def image_config(args, diff_id):
    labels = dict(label.split("=", 1) for label in args.label)
    config = {
        "User": args.user,
        "Entrypoint": [args.entrypoint],
        "Env": args.env,
        "Labels": labels,
        "WorkingDir": "/",
    }
    if args.expose:
        config["ExposedPorts"] = {f"{port}/tcp": {} for port in args.expose}
    if args.volume:
        config["Volumes"] = {volume: {} for volume in args.volume}
    return {
        "created": "1970-01-01T00:00:00Z",
        "architecture": args.arch,
        "os": "linux",
        "config": config,
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
        "history": [{"created": "1970-01-01T00:00:00Z", "created_by": "scripts/image"}],
    }


def canonical(value):
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()


def build(args):
    epoch = int(os.environ.get("SOURCE_DATE_EPOCH", "0"))
    layout = args.layout
    shutil.rmtree(layout, ignore_errors=True)
    os.makedirs(os.path.join(layout, "blobs", "sha256"))
    tar_bytes = layer_tar(args.rootfs, epoch)
    diff_id = "sha256:" + hashlib.sha256(tar_bytes).hexdigest()
    layer = gzip.compress(tar_bytes, compresslevel=args.level, mtime=0)
    layer_digest = write_blob(layout, layer)
    config = canonical(image_config(args, diff_id))
    config_digest = write_blob(layout, config)
    labels = dict(label.split("=", 1) for label in args.label)
    manifest = canonical({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                   "digest": config_digest, "size": len(config)},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                    "digest": layer_digest, "size": len(layer)}],
        "annotations": labels,
    })
    manifest_digest = write_blob(layout, manifest)
    index = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [{
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": manifest_digest, "size": len(manifest),
            "annotations": {"org.opencontainers.image.ref.name": args.tag,
                            "io.kuvryn-sync.image.reference": args.reference},
            "platform": {"architecture": args.arch, "os": "linux"},
        }],
    }
    with open(os.path.join(layout, "index.json"), "w") as out:
        json.dump(index, out, indent=2)
    with open(os.path.join(layout, "oci-layout"), "w") as out:
        json.dump({"imageLayoutVersion": "1.0.0"}, out)
    write_archive(layout, args.archive, epoch)
    return {
        "image": args.reference,
        "digest": manifest_digest,
        "compressed_bytes": len(layer) + len(config) + len(manifest),
        "uncompressed_bytes": len(tar_bytes),
        "archive": os.path.abspath(args.archive),
        "layout": os.path.abspath(layout),
    }


def write_archive(layout, archive, epoch):
    """oci-archive: the layout directory as a plain tar (what `skopeo copy oci-archive:` reads)."""
    with tarfile.open(archive, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name in ["oci-layout", "index.json"]:
            tar.add(os.path.join(layout, name), arcname=name, filter=_tar_filter(epoch))
        tar.add(os.path.join(layout, "blobs"), arcname="blobs", recursive=False,
                filter=_tar_filter(epoch))
        tar.add(os.path.join(layout, "blobs", "sha256"), arcname="blobs/sha256",
                recursive=False, filter=_tar_filter(epoch))
        for blob in sorted(os.listdir(os.path.join(layout, "blobs", "sha256"))):
            tar.add(os.path.join(layout, "blobs", "sha256", blob),
                    arcname=f"blobs/sha256/{blob}", filter=_tar_filter(epoch))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rootfs", required=True)
    parser.add_argument("--layout", required=True, help="OCI layout directory to (re)create")
    parser.add_argument("--archive", required=True, help="oci-archive file to write")
    parser.add_argument("--reference", required=True, help="REPOSITORY:TAG")
    parser.add_argument("--tag", required=True)
    parser.add_argument("--user", required=True)
    parser.add_argument("--entrypoint", required=True)
    parser.add_argument("--env", action="append", default=[])
    parser.add_argument("--label", action="append", default=[])
    parser.add_argument("--expose", action="append", default=[])
    parser.add_argument("--volume", action="append", default=[])
    parser.add_argument("--arch", default="amd64")
    parser.add_argument("--level", type=int, default=6, help="gzip level")
    json.dump(build(parser.parse_args()), sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
