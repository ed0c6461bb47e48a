#!/bin/sh
# tests/fuzz/make_seeds.sh TUBELET - remakes the fuzz targets' seed corpora (corpus/<target>/)
# and data/chunk/ from tubelet's own output: a synth dataset of tiny videos (64x64, 5 fps)
# and their annotations, tubelet prep's chunks and indexes, every command's --print-config,
# the head of the built-in merges;
# the reader's seeds add remuxes of a synth video (the ffmpeg tool, when there is one), and
# the safetensors and .npy seeds are written in those formats' layouts by python3 (no numpy
# needed); the pickled arrays of the captions target by pickle.dump itself (numpy needed). The files are committed; this script says how they were made. Regression inputs
# (regress/) are never touched.
set -eu

tubelet=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
here=$(cd "$(dirname "$0")" && pwd)
corpus="$here/corpus"
work=$(mktemp -d "${TMPDIR:-/tmp}/tubelet-seeds.XXXXXX")
trap 'rm -rf "$work"' EXIT
cd "$work"

for t in reader chunk index ek100 kinetics narration safetensors flags tokenizer merges \
         relevancy sentences captions; do
    rm -rf "${corpus:?}/$t"
    mkdir -p "$corpus/$t"
done

# Videos, annotations, chunks.
"$tubelet" synth --out synth --videos 4 --seconds 12 --size 64x64 --fps 5 --crf 40 \
    --threads 1 --jobs 1 >/dev/null
"$tubelet" prep --out prep --short-side 32 --fps 5 --chunk-seconds 2 --gop 4 --crf 35 \
    --threads 1 synth/videos/P01_01.mp4 >/dev/null
"$tubelet" synth --out small --videos 1 --seconds 5 --size 64x64 --fps 5 --crf 40 \
    --threads 1 --jobs 1 >/dev/null
v=prep/P01_01.mp4

# The chunk target reads its index against these chunks (data/chunk, committed).
rm -rf "$here/data/chunk"
mkdir -p "$here/data/chunk"
cp "$v"/0.mp4 "$v"/2.mp4 "$v"/4.mp4 "$here/data/chunk/"
cp "$v/video.idx" "$corpus/chunk/video.idx"
for f in video.idx 0.idx 2.idx 4.idx; do cp "$v/$f" "$corpus/index/$f"; done

# reader: an 8-byte request (fuzz_reader.c), then the file.
request() { printf "$1" >"$corpus/reader/$2"; cat "$3" >>"$corpus/reader/$2"; }
request '\003\037\027\300\003\005\013\021' synth.mp4 small/videos/P01_01.mp4
request '\001\017\017\000\001\002\003\004' chunk.mp4 "$v/0.mp4"
if command -v ffmpeg >/dev/null 2>&1; then
    ffmpeg -v error -i small/videos/P01_01.mp4 -c copy -bsf:v h264_mp4toannexb -f h264 raw.h264
    ffmpeg -v error -i small/videos/P01_01.mp4 -c copy remux.mkv
    request '\022\007\011\101\002\030\002\011' annexb.h264 raw.h264
    request '\044\040\020\102\003\001\010\020' remux.mkv remux.mkv
fi

# Annotations: synth's EPIC CSVs; Kinetics lists and narration CSVs made from them.
cp synth/annotations/EPIC_100_train.csv synth/annotations/EPIC_100_validation.csv \
    "$corpus/ek100/"
cp "$here/data/mir_split.csv" "$corpus/ek100/multi_noun.csv"
k=0
for f in synth/videos/*.mp4; do
    echo "videos/$(basename "$f") 60 $k" # 12 s at 5 fps
    k=$((k + 1))
done >"$corpus/kinetics/list.txt"
printf 'videos/with space.mp4 7\nvideos/P01_02.mp4\t60\t3\n' >"$corpus/kinetics/two_columns.txt"
awk -F, 'NR == 1 { print "video_id,start_s,end_s,text"; next }
    { split($5, a, ":"); split($6, b, ":");
      printf "%s,%.2f,%.2f,%s\n", $3, a[1] * 3600 + a[2] * 60 + a[3],
             b[1] * 3600 + b[2] * 60 + b[3], $9 }' \
    synth/annotations/EPIC_100_train.csv >"$corpus/narration/train.csv"
printf 'P01_01,1.5,3.25,"open the door, then close it"\nP01_02,0,2,""\n' \
    >"$corpus/narration/quoted.csv"
printf '\357\273\277video_id , start_s,end_s,text,captions\r\nP01_01,-0.5,3,,"[""a, b"", ""caf\\u00e9 \\ud83d\\ude00\\n""]"\r\nP01_02,1,2,"two\nlines",\r\n' \
    >"$corpus/narration/captions.csv"

# Tokenizer: byte 0 is the context length (77), then a caption.
i=0
awk -F, 'NR > 1 { print $9 }' synth/annotations/EPIC_100_train.csv | head -n 4 |
while read -r line; do
    printf 'M%s' "$line" >"$corpus/tokenizer/narration$i.txt"
    i=$((i + 1))
done
printf 'MPick up the KNIFE &amp;amp; cut &#39;onions&#39;,   then   wash it!!! 123' \
    >"$corpus/tokenizer/escapes.txt"
printf '\020\303\234ber \316\243\316\221\316\243 \304\260stanbul \305\277 \344\270\255\346\226\207 \360\237\230\200 <start_of_text>don'"'"'t' \
    >"$corpus/tokenizer/unicode.txt"

# Merges: the head of CLIP's file (data/), plain and gzip.
zcat "$here/../../data/bpe_simple_vocab_16e6.txt.gz" | head -n 300 >"$corpus/merges/head.txt"
zcat "$here/../../data/bpe_simple_vocab_16e6.txt.gz" | head -n 120 | gzip -9n \
    >"$corpus/merges/head.txt.gz"

# Flags: byte 0 picks the command (main.c's order), then lines of arguments, NUL, a config
# file; "@" names the file. Every command's own --print-config is its config.
i=0
for c in synth prep probe frames bench-load ann peek step train eval plot tokenize; do
    case $c in
    prep|probe|frames) args='x\n' ;;
    ann) args='stats\nx\n' ;;
    *) args='' ;;
    esac
    { printf "\\$(printf '%03o' $i)--config\n@\n$args"; printf '\000';
      "$tubelet" "$c" --print-config; } >"$corpus/flags/$c.cfg"
    i=$((i + 1))
done
{ printf '\010--config=@\n--data\nd\n--train\nt.csv\n--no-amp\n'; printf '\000';
  cat "$here/../../configs/avion-ek100-cls.cfg"; } >"$corpus/flags/train_recipe.cfg"
printf '\001--fps\n30000/1001\n--chunk-seconds=15\n--\n-odd name\n' >"$corpus/flags/prep_args.cfg"

# MIR: sentence lists of data/mir_split.csv, and its relevancy (5 clips x 3 sentences).
printf 'narration_id,narration\nP01_01_0,cut onion\nP01_01_2,wash pan\nP01_02_0,open tap\n' \
    >"$corpus/sentences/sentences.csv"
printf 'narration,narration_id\n"wash, pan",P01_02_1\n\nopen tap,P01_02_0\n' \
    >"$corpus/sentences/reordered.csv"

python3 - "$corpus" <<'PY'
import struct, sys
out = sys.argv[1]

def npy(name, values, shape, descr='<f4', major=1, fortran=False):
    fmt = {'<f4': '<f', '>f4': '>f', '<f8': '<d', '>f8': '>d'}[descr]
    dims = ', '.join(str(d) for d in shape) + (',' if len(shape) == 1 else '')
    head = "{'descr': '%s', 'fortran_order': %s, 'shape': (%s), }" % (descr, fortran, dims)
    pre = 10 if major == 1 else 12
    pad = 64 - (pre + len(head) + 1) % 64
    head = (head + ' ' * pad + '\n').encode()
    size = struct.pack('<H', len(head)) if major == 1 else struct.pack('<I', len(head))
    data = b''.join(struct.pack(fmt, v) for v in values)
    open(out + '/relevancy/' + name, 'wb').write(b'\x93NUMPY' + bytes([major, 0]) + size +
                                                 head + data)

# The split's relevancy: rows are clips, columns the sentences "cut onion" (clip 0), "wash
# pan" (clip 2), "open tap" (clip 3); (verb IoU + noun-set IoU) / 2.
rel = [1, 0, 0,  0.75, 0, 0,  0, 1, 0,  0, 0, 1,  0, 0.75, 0.25]
npy('relevancy.npy', rel, (5, 3))
npy('relevancy_f8_be.npy', rel, (5, 3), '>f8')
npy('relevancy_v2.npy', rel, (5, 3), '<f8', major=2)
npy('flat.npy', rel, (15,))
npy('fortran.npy', rel, (3, 5), fortran=True)
npy('empty.npy', [], (0, 3))

def safetensors(name, tensors, metadata=None):
    header, data = {}, b''
    if metadata is not None:
        header['__metadata__'] = metadata
    for tname, dtype, shape, raw in tensors:
        header[tname] = {'dtype': dtype, 'shape': shape,
                         'data_offsets': [len(data), len(data) + len(raw)]}
        data += raw
    import json
    text = json.dumps(header, separators=(',', ':')).encode()
    text += b' ' * (-len(text) % 8)
    open(out + '/safetensors/' + name, 'wb').write(struct.pack('<Q', len(text)) + text + data)

f32 = struct.pack('<6f', 1, -2, 0.5, 3e38, -0.0, 1e-42)
i64 = struct.pack('<3q', 0, -1, 2**62)
safetensors('checkpoint.safetensors',
            [('blocks.0.attn.qkv.weight', 'F32', [2, 3], f32), ('step', 'I64', [3], i64)],
            {'step': '12', 'config': '{"width": 192}'})
safetensors('half.safetensors',
            [('bf16', 'BF16', [4], struct.pack('<4H', 0x3f80, 0xc000, 0x7f80, 0x0001)),
             ('f16', 'F16', [2, 2], struct.pack('<4H', 0x3c00, 0x8001, 0x7c00, 0x7e00)),
             ('scalar', 'F32', [], struct.pack('<f', 7))])
safetensors('empty.safetensors', [])
PY
# The training relevancy (--train-relevancy): the same matrix pickled as AVION's file is.
cp "$corpus/relevancy/relevancy.npy" "$corpus/relevancy/relevancy_f8_be.npy" "$corpus/captions/"
"${PYTHON:-python3}" - "$corpus/captions" <<'PY'
import pickle, sys
import numpy as np
out = sys.argv[1]
rel = np.array([1, 0, 0, 0.75, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0.75, 0.25]).reshape(5, 3)
def dump(name, obj, protocol):
    with open(out + '/' + name, 'wb') as f:
        pickle.dump(obj, f, protocol=protocol)
for p in (2, 3, 4, 5):
    dump('relevancy_p%d.pkl' % p, rel, p)
dump('relevancy_f4_p4.pkl', rel.astype(np.float32), 4)
dump('relevancy_be_p3.pkl', rel.astype('>f8'), 3)
dump('fortran_p4.pkl', np.asfortranarray(rel), 4)
dump('dict_p4.pkl', {'relevancy': rel}, 4)
PY

echo "make_seeds: $(find "$corpus" -type f | wc -l) seeds, $(du -sk "$corpus" | cut -f1) KB"
