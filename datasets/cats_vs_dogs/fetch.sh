#!/usr/bin/env bash
# Downloads Microsoft's "Kaggle Cats and Dogs Dataset" (kagglecatsanddogs_5340.zip, ~787 MB,
# 25,000 JPEGs) and lays it out for `type: image_folder`:
#   datasets/cats_vs_dogs/train/{cat,dog}/N.jpg   ids 0..9999 of each class     (10,000 each)
#   datasets/cats_vs_dogs/val/{cat,dog}/N.jpg     ids 10000..12499 of each class (2,500 each)
#   datasets/cats_vs_dogs/fetch.sh [ZIP]   (ZIP: an already downloaded copy; default: download it)
# Microsoft publishes no checksum for the zip: the script tests the archive's own CRCs (unzip -t)
# and prints its SHA-256 for your records. Zero-byte files (Cat/666.jpg, Dog/11702.jpg) are
# dropped; the remaining undecodable files are left for `skip_corrupt: true` to skip and count.
set -euo pipefail
cd "$(dirname "$0")/../.."
# shellcheck source=datasets/fetch-lib.sh
. datasets/fetch-lib.sh
url=https://download.microsoft.com/download/3/E/1/3E1C3F21-ECDB-4869-8368-6DEBA77B919F/kagglecatsanddogs_5340.zip
out=datasets/cats_vs_dogs
zip=${1:-datasets/downloads/kagglecatsanddogs_5340.zip}
if [ -d "$out/train/cat" ] && [ -d "$out/val/dog" ]; then echo "$out/train and $out/val exist"; exit 0; fi
[ -n "${1:-}" ] || fetch "$url" "$zip"
[ -s "$zip" ] || { echo "cats_vs_dogs: $zip not found" >&2; exit 3; }
echo "$zip: sha256 $(sha256sum "$zip" | cut -d' ' -f1)"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/petimages.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
if command -v unzip >/dev/null 2>&1; then
  unzip -tq "$zip" >/dev/null || { echo "$zip: the archive is damaged (unzip -t failed); delete it and run again" >&2; exit 3; }
  unzip -q "$zip" 'PetImages/*' -d "$tmp"
else  # Python's zipfile checks every member's CRC while extracting
  python3 - "$zip" "$tmp" <<'PY'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z:
    bad = z.testzip()
    if bad: sys.exit(f"{sys.argv[1]}: damaged member {bad}")
    z.extractall(sys.argv[2], [n for n in z.namelist() if n.startswith("PetImages/")])
PY
fi
if [ ! -d "$tmp/PetImages/Cat" ] || [ ! -d "$tmp/PetImages/Dog" ]; then
  echo "$zip: no PetImages/Cat and PetImages/Dog inside" >&2; exit 3
fi

for cls in Cat Dog; do
  lower=$(echo "$cls" | tr '[:upper:]' '[:lower:]')
  mkdir -p "$out/train/$lower" "$out/val/$lower"
  find "$tmp/PetImages/$cls" -maxdepth 1 -type f -size 0 -print -delete | sed 's/^/dropped empty file: /'
  moved=0
  for f in "$tmp/PetImages/$cls"/*.jpg; do
    id=$(basename "$f" .jpg)
    case $id in *[!0-9]* | '') continue ;; esac   # only N.jpg (not Thumbs.db or other files)
    if [ "$id" -lt 10000 ]; then mv "$f" "$out/train/$lower/"; else mv "$f" "$out/val/$lower/"; fi
    moved=$((moved + 1))
  done
  echo "$lower: $moved images ($(find "$out/train/$lower" -type f | wc -l) train, $(find "$out/val/$lower" -type f | wc -l) val)"
done
