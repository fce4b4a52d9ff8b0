package org.sparkdl.bridge;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.ArrayList;
import java.util.List;

/**
 * Little-endian data written to and read from a list of byte arrays of at most a chunk limit each
 * (sparkdl/chunking.py MAX_CHUNK_BYTES), so that no single array exceeds Java's 2 GiB limit however large the
 * weights or optimizer states are. Values of 4 or 8 bytes may straddle two chunks.
 */
final class Chunks {
    private Chunks() {
    }

    /** Appends values, starting a new chunk whenever the current one is full. */
    static final class Writer {
        private final int limit;
        private final List<byte[]> done = new ArrayList<>();
        private ByteBuffer current;

        Writer(int limit) {
            this.limit = limit;
            this.current = ByteBuffer.allocate(limit).order(ByteOrder.LITTLE_ENDIAN);
        }

        private void put(byte[] b) {
            for (byte x : b) {
                if (!current.hasRemaining()) {
                    done.add(current.array());
                    current = ByteBuffer.allocate(limit).order(ByteOrder.LITTLE_ENDIAN);
                }
                current.put(x);
            }
        }

        Writer putInt(int v) {
            put(ByteBuffer.allocate(4).order(ByteOrder.LITTLE_ENDIAN).putInt(v).array());
            return this;
        }

        Writer putLong(long v) {
            put(ByteBuffer.allocate(8).order(ByteOrder.LITTLE_ENDIAN).putLong(v).array());
            return this;
        }

        /** Floats in bulk: whole runs that fit the current chunk are copied at once. */
        Writer putFloats(float[] values) {
            int i = 0;
            while (i < values.length) {
                if (current.remaining() < 4) {
                    if (current.position() % 4 != 0) {  // unaligned tail: byte by byte
                        putInt(Float.floatToRawIntBits(values[i++]));
                        continue;
                    }
                    done.add(current.array());
                    current = ByteBuffer.allocate(limit).order(ByteOrder.LITTLE_ENDIAN);
                }
                int n = Math.min(values.length - i, current.remaining() / 4);
                current.asFloatBuffer().put(values, i, n);
                current.position(current.position() + 4 * n);
                i += n;
            }
            return this;
        }

        byte[][] chunks() {
            List<byte[]> out = new ArrayList<>(done);
            out.add(java.util.Arrays.copyOf(current.array(), current.position()));
            return out.toArray(new byte[0][]);
        }
    }

    /** Reads values across the chunks in order. */
    static final class Reader {
        private final List<byte[]> chunks;
        private int index;
        private ByteBuffer current;

        Reader(List<byte[]> chunks) {
            this.chunks = chunks;
            this.current = ByteBuffer.allocate(0);
        }

        private byte[] take(int n) {
            byte[] out = new byte[n];
            for (int i = 0; i < n; i++) {
                while (!current.hasRemaining()) {
                    if (index >= chunks.size()) {
                        throw new IllegalArgumentException("sparkdl bridge: chunked data ends early");
                    }
                    current = ByteBuffer.wrap(chunks.get(index++)).order(ByteOrder.LITTLE_ENDIAN);
                }
                out[i] = current.get();
            }
            return out;
        }

        int getInt() {
            return ByteBuffer.wrap(take(4)).order(ByteOrder.LITTLE_ENDIAN).getInt();
        }

        long getLong() {
            return ByteBuffer.wrap(take(8)).order(ByteOrder.LITTLE_ENDIAN).getLong();
        }

        float[] getFloats(int n) {
            float[] out = new float[n];
            int i = 0;
            while (i < n) {
                if (current.remaining() >= 4) {
                    int m = Math.min(n - i, current.remaining() / 4);
                    current.slice().order(ByteOrder.LITTLE_ENDIAN).asFloatBuffer().get(out, i, m);
                    current.position(current.position() + 4 * m);
                    i += m;
                } else {
                    out[i++] = Float.intBitsToFloat(getInt());
                }
            }
            return out;
        }

        boolean hasRemaining() {
            if (current.hasRemaining()) {
                return true;
            }
            for (int i = index; i < chunks.size(); i++) {
                if (chunks.get(i).length > 0) {
                    return true;
                }
            }
            return false;
        }
    }
}
