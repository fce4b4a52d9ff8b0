package org.sparkdl.bridge;

import java.util.ArrayList;
import java.util.List;
import java.util.function.Consumer;

/**
 * The optimizer states of all shards as bytes (sparkdl/engine/jvm_reduce.py pack_states writes the same), in
 * chunks of at most the chunk limit ({@link Chunks}):
 * <pre>
 * int32 K | per block: int32 block | int64 step | int32 arrays | int32 length | float32[arrays * length]
 * </pre>
 */
final class StateCodec {
    private StateCodec() {
    }

    static List<ShardState> read(List<byte[]> chunks, long[] bounds) {
        List<ShardState> list = new ArrayList<>(bounds.length - 1);
        read(chunks, bounds, list::add);
        return list;
    }

    /**
     * Each block's state in block order to {@code sink} as soon as it is decoded; {@code chunks} (a mutable list) is
     * emptied as it is read, so the packed bytes and the decoded states are not both held whole.
     */
    static void read(List<byte[]> chunks, long[] bounds, Consumer<ShardState> sink) {
        Chunks.Reader b = new Chunks.Reader(chunks);
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
        if (b.hasRemaining()) {
            throw new IllegalArgumentException("sparkdl bridge: packed states have extra bytes");
        }
    }

    /** {@code states} (sorted by block) in chunks of at most {@code limit} bytes. */
    static byte[][] write(List<ShardState> states, long[] bounds, int limit) {
        Chunks.Writer b = new Chunks.Writer(limit);
        b.putInt(states.size());
        for (ShardState s : states) {
            int length = (int) (bounds[s.block + 1] - bounds[s.block]);
            b.putInt(s.block).putLong(s.step).putInt(s.arrays.length).putInt(length);
            for (float[] a : s.arrays) {
                b.putFloats(a);
            }
        }
        return b.chunks();
    }
}
