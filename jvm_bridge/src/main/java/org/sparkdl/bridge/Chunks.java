package org.sparkdl.bridge;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.List;

/**
 * Little-endian data read from a list of byte arrays (the py4j calls that carried it, each at most the chunk
 * limit, sparkdl/chunking.py MAX_CHUNK_BYTES), so that no single array exceeds Java's 2 GiB limit however large
 * the optimizer states are. Values of 4 or 8 bytes may straddle two chunks.
 */
final class Chunks {
    private Chunks() {
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
