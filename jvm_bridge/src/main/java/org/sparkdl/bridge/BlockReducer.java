package org.sparkdl.bridge;

import java.util.ArrayList;
import java.util.Collections;
import java.util.Iterator;
import java.util.List;

import org.apache.spark.api.java.function.FlatMapFunction2;

import scala.Tuple2;

/**
 * Stage 2 of an iteration, on the JVM: task k receives every partition's gradient record of block k and
 * shard k's cached state, sums the records in the fixed tree order over partition ids ({@link TreeSum}; so
 * the result depends neither on the shuffle's arrival order nor on how tasks pre-summed partitions), divides by the global normalizer and applies the optimizer update. The
 * arithmetic is that of sparkdl/engine/allreduce.py and the optimizer kernels, operation for operation.
 */
final class BlockReducer implements FlatMapFunction2<Iterator<Tuple2<Integer, byte[]>>, Iterator<ShardState>, ShardState> {
    private final UpdateProgram program;
    /** In a reduce task: the weights the iteration started from, and where its new weights go; else null. */
    private final ResidentWeights weights;
    private final ResidentWeights next;
    /** The weights themselves (the driver-reduce mode, on the driver), else null. */
    private final byte[][] localWeights;
    private final long[] bounds;

    /** In a reduce task: block k's weights come from {@code weights} and its new weights go to {@code next}
     * (the state returned has no {@link ShardState#shard}). */
    BlockReducer(UpdateProgram program, ResidentWeights weights, ResidentWeights next, long[] bounds) {
        this.program = program;
        this.weights = weights;
        this.next = next;
        this.localWeights = null;
        this.bounds = bounds;
    }

    /** On the driver: the weights are at hand, and the new block's weights are returned in the state. */
    BlockReducer(UpdateProgram program, byte[][] weights, long[] bounds) {
        this.program = program;
        this.weights = null;
        this.next = null;
        this.localWeights = weights;
        this.bounds = bounds;
    }

    @Override
    public Iterator<ShardState> call(Iterator<Tuple2<Integer, byte[]>> records, Iterator<ShardState> states) {
        if (!states.hasNext()) {
            throw new IllegalStateException("sparkdl bridge: a reduce task has no optimizer state");
        }
        ShardState old = states.next();
        int k = old.block;
        int lo = (int) bounds[k];
        int n = (int) bounds[k + 1] - lo;
        List<byte[]> grads = new ArrayList<>();
        List<byte[]> buffers = new ArrayList<>();
        boolean missed = false;
        while (records.hasNext()) {
            byte[] f = records.next()._2();
            int kind = Frames.kind(f);
            if (Frames.isGradient(kind)) {
                grads.add(f);
            } else if (kind == Frames.BUFFERS) {
                buffers.add(f);
            } else if (kind == Frames.MISS) {
                missed = true;
            } else {
                throw new IllegalArgumentException("sparkdl bridge: unknown record kind " + kind);
            }
        }
        if (missed) {
            return Collections.singletonList(old.missedCopy()).iterator();
        }
        // g = (0 + tree sum) / normalizer: the Python reduce's arithmetic (the 0 + turns -0.0 into +0.0), in one
        // pass over the root's own array (a block is hundreds of MB in a large model: no second copy)
        NodeSums.Value root = NodeSums.root(grads);
        double loss = root == null ? 0.0 : root.loss;
        double normalizer = root == null ? 0.0 : root.normalizer;
        float[] g = root == null ? new float[n] : root.values();
        if (g.length != n) {
            throw new IllegalArgumentException("sparkdl bridge: gradient records of block " + k + " have "
                    + g.length + " values, expected " + n);
        }
        if (normalizer > 0) {
            float d = (float) normalizer;
            for (int i = 0; i < n; i++) {
                g[i] = (0f + g[i]) / d;
            }
        } else {
            java.util.Arrays.fill(g, 0f);
        }
        float[] p = localWeights != null ? Frames.floats(localWeights, 4L * lo, n)
                : Frames.floats(weights.shard(k), 0, n);
        float[][] arrays = old.copyArrays();
        if (arrays.length != program.numStateArrays()) {
            throw new IllegalStateException("sparkdl bridge: shard " + k + " has " + arrays.length
                    + " state arrays, the optimizer needs " + program.numStateArrays());
        }
        ShardState state = new ShardState(k, old.step + 1, arrays);
        float scale = program.scale(k, g);
        DriverSplit.Range update = (from, to) -> {
            program.apply(k, p, g, arrays, from, to, scale);
            return Frames.allFinite(p, from, to);
        };
        state.finite = localWeights != null ? DriverSplit.all(n, update) : update.run(0, n);
        byte[] shard = Frames.bytes(p);
        if (next != null) {
            next.putShard(k, shard);
        } else {
            state.shard = shard;
        }
        state.lossSum = loss;
        state.normalizerSum = normalizer;
        NodeSums.Value buffered = NodeSums.root(buffers);
        state.count = buffered == null ? 0 : buffered.count;
        state.bufferSum = buffered == null ? null : buffered.values();
        return Collections.singletonList(state).iterator();
    }

}
