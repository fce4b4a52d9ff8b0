package org.sparkdl.bridge;

import java.io.Serializable;
import java.nio.ByteBuffer;

import org.apache.spark.SparkEnv;
import org.apache.spark.storage.BlockData;
import org.apache.spark.storage.BlockId;
import org.apache.spark.storage.BlockManager;
import org.apache.spark.storage.BlockResult;
import org.apache.spark.storage.BroadcastBlockId;
import org.apache.spark.storage.StorageLevel;
import org.apache.spark.util.io.ChunkedByteBuffer;

import scala.Option;
import scala.reflect.ClassTag;
import scala.reflect.ClassTag$;

/**
 * One version of the weights kept where they were computed, not on the driver (BigDL's
 * {@code AllReduceParameter}): reduce task k stores block k's new weights in its executor's block manager, the
 * driver stores the buffers, and each executor fetches the K blocks once per iteration (from whichever block
 * managers hold them), assembles the weights the gradient tasks read and caches them until the version is
 * released. The driver neither receives the updated weights nor serves them: the bytes reaching it per
 * iteration are the reduce tasks' small results, whatever the model's size.
 *
 * <p>Every block of a version is a {@link BroadcastBlockId} of one <em>anchor</em> broadcast the driver creates
 * (a tiny value: it reserves the id); destroying the anchor removes the version's blocks from every block
 * manager, the driver's included, as Spark removes a broadcast's pieces. A block lost with its executor makes
 * the task that needs it fail, which the trainer's recovery replays from its last snapshot.
 */
final class ResidentWeights implements Serializable {
    private static final long serialVersionUID = 1L;

    /** The anchor broadcast's id. */
    final long id;
    /** Number of AllReduce blocks. */
    final int blocks;
    /** Largest chunk of the assembled weights ({@link Frames#chunks}). */
    private final int maxChunkBytes;

    ResidentWeights(long id, int blocks, int maxChunkBytes) {
        this.id = id;
        this.blocks = blocks;
        this.maxChunkBytes = maxChunkBytes;
    }

    // Field names match Spark's BlockId parser ([_A-Za-z0-9]*): a remote fetch sends the name, not the object.
    private BlockId shardId(int k) {
        return BroadcastBlockId.apply(id, "sparkdl_shard_" + k);
    }

    private BlockId buffersId() {
        return BroadcastBlockId.apply(id, "sparkdl_buffers");
    }

    private BlockId assembledId() {
        return BroadcastBlockId.apply(id, "sparkdl_weights");
    }

    /** Blocks of resident weights (every version) in all block managers of {@code jsc}'s application (tests). */
    static int count(org.apache.spark.api.java.JavaSparkContext jsc) {
        scala.Function1<BlockId, Object> ours = new scala.runtime.AbstractFunction1<BlockId, Object>() {
            @Override
            public Object apply(BlockId b) {
                return b.name().matches("broadcast_[0-9]+_sparkdl_.*");
            }
        };
        return jsc.sc().env().blockManager().master().getMatchingBlockIds(ours, true).size();
    }

    private static BlockManager manager() {
        return SparkEnv.get().blockManager();
    }

    /** Store block {@code k}'s weights (float32 little-endian) in this JVM's block manager, reported to the master
     * so that other executors find it. A second store of the same block (a retried task) keeps the first: both
     * hold the same bits, every iteration being deterministic. */
    void putShard(int k, byte[] weights) {
        put(shardId(k), weights);
    }

    /** Store the buffers (float32 little-endian, possibly empty): on the driver. */
    void putBuffers(byte[] values) {
        put(buffersId(), values);
    }

    @SuppressWarnings("unchecked")
    private static <T> ClassTag<T> tag(Class<T> type) {
        return (ClassTag<T>) ClassTag$.MODULE$.apply(type);
    }

    private static void put(BlockId block, byte[] bytes) {
        BlockManager bm = manager();
        bm.putBytes(block, new ChunkedByteBuffer(ByteBuffer.wrap(bytes)), StorageLevel.MEMORY_AND_DISK_SER(), true,
                bm.putBytes$default$5(), bm.putBytes$default$6(), tag(byte[].class));
    }

    /** Block {@code k}'s weights, from this JVM's block manager or another's. */
    byte[] shard(int k) {
        return fetch(shardId(k));
    }

    /**
     * The whole weights, parameters then buffers, in chunks of at most the chunk limit (what a gradient task
     * sends its Python worker): assembled once per executor JVM and cached in its block manager until the version
     * is released.
     */
    byte[][] chunks() {
        BlockManager bm = manager();
        BlockId all = assembledId();
        synchronized (ResidentWeights.class) {  // the tasks of one executor wait for the first to fetch
            Option<BlockResult> hit = bm.getLocalValues(all);
            if (hit.isDefined()) {
                try {
                    return (byte[][]) hit.get().data().next();
                } finally {
                    bm.releaseLock(all, bm.releaseLock$default$2());
                }
            }
            byte[][] chunks = assemble();
            bm.putSingle(all, chunks, StorageLevel.MEMORY_AND_DISK(), false, tag(byte[][].class));
            return chunks;
        }
    }

    /** Write the whole weights, parameters then buffers, to {@code out} one block at a time (the driver: a model's
     * weights are never all in its heap at once). */
    void writeTo(java.io.OutputStream out) throws java.io.IOException {
        for (int k = 0; k < blocks; k++) {
            out.write(shard(k));
        }
        out.write(fetch(buffersId()));
    }

    private byte[][] assemble() {
        byte[][] parts = new byte[blocks + 1][];
        for (int k = 0; k < blocks; k++) {
            parts[k] = shard(k);
        }
        parts[blocks] = fetch(buffersId());
        return Frames.chunks(parts, maxChunkBytes);
    }

    private byte[] fetch(BlockId block) {
        BlockManager bm = manager();
        Option<BlockData> local = bm.getLocalBytes(block);
        if (local.isDefined()) {
            BlockData data = local.get();
            try {
                ByteBuffer b = data.toByteBuffer();
                if (b.hasArray() && b.arrayOffset() == 0 && b.position() == 0 && b.remaining() == b.array().length) {
                    return b.array();  // the stored array itself (in memory; a block is never written after its put)
                }
                byte[] out = new byte[b.remaining()];
                b.get(out);
                return out;
            } finally {
                bm.releaseLockAndDispose(block, data, bm.releaseLockAndDispose$default$3());
            }
        }
        Option<ChunkedByteBuffer> remote = bm.getRemoteBytes(block);
        if (remote.isEmpty()) {
            throw new IllegalStateException("sparkdl bridge: weights block " + block.name() + " is in no block manager "
                    + "(lost with its executor, or released)");
        }
        return remote.get().toArray();
    }
}
