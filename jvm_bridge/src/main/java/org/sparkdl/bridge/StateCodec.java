package org.sparkdl.bridge;

import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.ArrayList;
import java.util.Iterator;
import java.util.List;
import java.util.function.Consumer;

/**
 * The optimizer states of all shards as bytes (sparkdl/engine/jvm_reduce.py pack_states writes the same), read
 * from and written to a stream:
 * <pre>
 * int32 K | per block: int32 block | int64 step | int32 arrays | int32 length | float32[arrays * length]
 * </pre>
 */
final class StateCodec {
    private StateCodec() {
    }

    static List<ShardState> read(InputStream in, long[] bounds) throws IOException {
        List<ShardState> list = new ArrayList<>(bounds.length - 1);
        read(in, bounds, list::add);
        return list;
    }

    /**
     * Each block's state in block order to {@code sink} as soon as it is decoded from {@code in}, which must then be
     * at its end: one block's states at a time in memory (all of a 100M-parameter model's, read whole and then
     * decoded, were twice its bytes in the driver's heap).
     */
    static void read(InputStream in, long[] bounds, Consumer<ShardState> sink) throws IOException {
        Input b = new Input(in);
        int k = b.getInt();
        if (k != bounds.length - 1) {
            throw new IllegalArgumentException("sparkdl bridge: " + k + " shard states for " + (bounds.length - 1)
                    + " blocks");
        }
        for (int i = 0; i < k; i++) {
            int block = b.getInt();
            long step = b.getLong();
            int arrays = b.getInt();
            int length = b.getInt();
            if (block != i || length != bounds[i + 1] - bounds[i]) {
                throw new IllegalArgumentException("sparkdl bridge: state " + i + " is for block " + block
                        + " with " + length + " elements");
            }
            float[][] a = new float[arrays][];
            for (int j = 0; j < arrays; j++) {
                a[j] = b.getFloats(length);
            }
            sink.accept(new ShardState(block, step, a));
        }
        if (!b.atEnd()) {
            throw new IllegalArgumentException("sparkdl bridge: packed states have extra bytes");
        }
    }

    /** Little-endian values read from a stream through a small buffer. */
    private static final class Input {
        private final InputStream in;
        private final ByteBuffer buf = ByteBuffer.allocate(1 << 16).order(ByteOrder.LITTLE_ENDIAN);

        Input(InputStream in) {
            this.in = in;
            buf.limit(0);
        }

        /** At least {@code n} (at most the buffer's capacity) bytes remain in the buffer. */
        private void need(int n) throws IOException {
            if (buf.remaining() >= n) {
                return;
            }
            buf.compact();
            while (buf.position() < n) {
                int r = in.read(buf.array(), buf.position(), buf.capacity() - buf.position());
                if (r < 0) {
                    throw new IllegalArgumentException("sparkdl bridge: packed states end early");
                }
                buf.position(buf.position() + r);
            }
            buf.flip();
        }

        int getInt() throws IOException {
            need(4);
            return buf.getInt();
        }

        long getLong() throws IOException {
            need(8);
            return buf.getLong();
        }

        float[] getFloats(int n) throws IOException {
            float[] out = new float[n];
            for (int i = 0; i < n; ) {
                need(4);
                int m = Math.min(n - i, buf.remaining() / 4);
                buf.asFloatBuffer().get(out, i, m);
                buf.position(buf.position() + 4 * m);
                i += m;
            }
            return out;
        }

        boolean atEnd() throws IOException {
            return !buf.hasRemaining() && in.read() == -1;
        }
    }

    /** The {@code k} states, in block order, written to {@code out} one at a time. */
    static void write(int k, Iterator<ShardState> states, long[] bounds, OutputStream out) throws IOException {
        ByteBuffer b = ByteBuffer.allocate(1 << 16).order(ByteOrder.LITTLE_ENDIAN);
        b.putInt(k);
        for (int i = 0; i < k; i++) {
            ShardState s = states.next();
            if (s.block != i) {
                throw new IllegalStateException("sparkdl bridge: state of block " + s.block + " where block " + i
                        + " belongs");
            }
            int length = (int) (bounds[i + 1] - bounds[i]);
            b.putInt(s.block).putLong(s.step).putInt(s.arrays.length).putInt(length);
            for (float[] a : s.arrays) {
                for (int j = 0; j < a.length; ) {
                    if (b.remaining() < 4) {
                        drain(b, out);
                    }
                    int n = Math.min(a.length - j, b.remaining() / 4);
                    b.asFloatBuffer().put(a, j, n);
                    b.position(b.position() + 4 * n);
                    j += n;
                }
            }
            if (b.remaining() < 20) {
                drain(b, out);
            }
        }
        if (states.hasNext()) {
            throw new IllegalStateException("sparkdl bridge: more than " + k + " shard states");
        }
        drain(b, out);
    }

    private static void drain(ByteBuffer b, OutputStream out) throws IOException {
        out.write(b.array(), 0, b.position());
        b.clear();
    }
}
