"""Bad model files for bad_input_test.sh, made from good ones (standard library only).

bad_files.py CHECKPOINT EMBEDDINGS_PREFIX writes into the working folder:
  neg.gckpt       iteration -3          (valid CRC, impossible content)
  shape.gckpt     model.fusion.embed_dim changed: the stored config no longer fits the weights
  dupclass.gckpt  an identity listed twice
  nan.npy/.csv    one embedding value NaN
  dup.npy/.csv    every row labelled with the first row's sequence id
  cond.npy/.csv   row 1's condition column 'xx'
"""
import json
import struct
import sys
import zlib


def patch_checkpoint(src, dst, edit):
    b = open(src, 'rb').read()
    m, p = struct.unpack_from('<IQ', b, 12)
    meta = json.loads(b[32:32 + m])
    edit(meta)
    mj = json.dumps(meta).encode()
    body = mj + b[32 + m:]
    head = bytearray(b[:32])
    struct.pack_into('<IQ', head, 12, len(mj), p)
    struct.pack_into('<I', head, 24, zlib.crc32(body) & 0xffffffff)
    open(dst, 'wb').write(bytes(head) + body)


def save_dump(name, npy, lines):
    open(name + '.npy', 'wb').write(npy)
    open(name + '.csv', 'w').write('\n'.join(lines) + '\n')


def main(ckpt, prefix):
    patch_checkpoint(ckpt, 'neg.gckpt', lambda m: m.update(iteration=-3))
    patch_checkpoint(ckpt, 'shape.gckpt', lambda m: m['config']['model']['fusion'].update(embed_dim=64))
    patch_checkpoint(ckpt, 'dupclass.gckpt', lambda m: m.update(classes=[1] + m['classes'][:-1]))
    raw = open(prefix + '.npy', 'rb').read()
    at = 10 + struct.unpack_from('<H', raw, 8)[0]
    lines = open(prefix + '.csv').read().splitlines()
    nan = bytearray(raw)
    struct.pack_into('<f', nan, at + 4 * 7, float('nan'))
    save_dump('nan', bytes(nan), lines)
    first = lines[1].split(',')
    save_dump('dup', raw, [lines[0]] + [','.join([row.split(',')[0]] + first[1:]) for row in lines[1:]])
    cond = list(lines)
    cond[1] = cond[1].replace(',nm,', ',xx,')
    save_dump('cond', raw, cond)


if __name__ == '__main__':
    main(sys.argv[1], sys.argv[2])
