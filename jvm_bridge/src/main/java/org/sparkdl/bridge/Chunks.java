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

    /**
     * Appends values, starting a new chunk whenever the current one is full. A chunk starts small and doubles up
     * to the limit, so a writer holds about the bytes written, never a whole limit's worth (1 GiB by default).
     */
    static final class Writer {
        private static final int INITIAL = 1 << 16;
        private final int limit;
        private final List<byte[]> done = new ArrayList<>();
        private ByteBuffer current;

        Writer(int limit) {
            this.limit = limit;
            this.current = allocate(Math.min(limit, INITIAL));
        }

        private static ByteBuffer allocate(int n) {
            return ByteBuffer.allocate(n).order(ByteOrder.LITTLE_ENDIAN);
        }

        /** Doubles the current chunk (up to the limit), keeping what it holds. */
        private void grow() {
            ByteBuffer bigger = allocate((int) Math.min((long) limit, 2L * current.capacity()));
            current.flip();
            bigger.put(current);
            current = bigger;
        }

        /** Room for at least one more byte: a larger current chunk while under the limit, else a new chunk. */
        private void room() {
            if (current.hasRemaining()) {
                return;
            }
            if (current.capacity() < limit) {
                grow();
            } else {
                done.add(current.array());
                current = allocate(Math.min(limit, INITIAL));
            }
        }

        private void put(byte[] b) {
            for (byte x : b) {
                room();
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
                    if (current.capacity() < limit) {
                        grow();
                        continue;
                    }
                    if (current.position() % 4 != 0) {  // unaligned tail: byte by byte
                        putInt(Float.floatToRawIntBits(values[i++]));
                        continue;
                    }
                    room();
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

    /** Reads values across the chunks in order, releasing each chunk (setting it to null) once it is read. */
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
                    current = ByteBuffer.wrap(chunks.set(index++, null)).order(ByteOrder.LITTLE_ENDIAN);
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
                if (chunks.get(i) != null && chunks.get(i).length > 0) {
                    return true;
                }
            }
            return false;
        }
    }
}
