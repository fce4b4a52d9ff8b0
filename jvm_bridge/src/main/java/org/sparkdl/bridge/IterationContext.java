package org.sparkdl.bridge;

import java.io.Serializable;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.ArrayList;
import java.util.Iterator;
import java.util.List;

import org.apache.spark.api.java.function.Function2;
import org.apache.spark.broadcast.Broadcast;

/**
 * What every gradient task of one iteration receives before its data: a header record and the weights.
 * The driver sets the fields before each job; Spark serializes this object into the job's tasks, so a task
 * sees the values of its own iteration.
 *
 * <pre>
 * header: int32 magic 0x5344_4c31 | int32 epoch | int32 iteration in epoch | int32 global iteration |
 *         int32 full (1: the partition's data records follow) | int32 chunks | int32 n | int32[n] partitions
 *         [| int32 length | UTF-8 path of the task's {@link TaskLink} socket: multi-iteration jobs only]
 * weights: the float32 parameters followed by the float32 buffers (inline, broadcast or resident), in {@code chunks}
 *          records of at most the chunk limit each (sparkdl/chunking.py)
 * </pre>
 */
final class IterationContext implements Serializable {
    static final int MAGIC = 0x53444c31;

    int epoch;
    int iteration;
    int globalIteration;
    Broadcast<byte[][]> weights;
    /** The weights themselves when they travel inside the tasks (then {@link #weights} is null). */
    byte[][] inlineWeights;
    /** The weights kept on the executors (executor reduce; then {@link #weights} is null). */
    ResidentWeights resident;
    /** Data partitions each group task of the local-copy source computes (set on the driver). */
    int[][] groups = new int[0][];
    /** The {@link Rendezvous} of a multi-iteration job ({@link TrainingLoop#run}), else null. */
    String rendezvous;

    byte[] header(boolean full, int chunks, int[] partitions, String link) {
        byte[] path = link == null ? new byte[0] : link.getBytes(java.nio.charset.StandardCharsets.UTF_8);
        ByteBuffer b = ByteBuffer.allocate(28 + 4 * partitions.length + (link == null ? 0 : 4 + path.length))
                .order(ByteOrder.LITTLE_ENDIAN);
        b.putInt(MAGIC).putInt(epoch).putInt(iteration).putInt(globalIteration).putInt(full ? 1 : 0);
        b.putInt(chunks).putInt(partitions.length);
        for (int p : partitions) {
            b.putInt(p);
        }
        if (link != null) {
            b.putInt(path.length).put(path);
        }
        return b.array();
    }

    /** The records that start task {@code index}: header and weights, then {@code data} (full mode). */
    Iterator<byte[]> frames(int index, boolean full, Iterator<byte[]> data) {
        int[] partitions = full ? new int[] {index} : groups[index];
        byte[][] chunks = resident != null ? resident.chunks()
                : inlineWeights != null ? inlineWeights : weights.value();
        List<byte[]> head = new ArrayList<>(1 + chunks.length);
        String link = full || rendezvous == null ? null : TaskLink.open(rendezvous, index);
        head.add(header(full, chunks.length, partitions, link));
        java.util.Collections.addAll(head, chunks);
        if (data == null) {
            return head.iterator();
        }
        Iterator<byte[]> first = head.iterator();
        return new Iterator<byte[]>() {
            @Override
            public boolean hasNext() {
                return first.hasNext() || data.hasNext();
            }

            @Override
            public byte[] next() {
                return first.hasNext() ? first.next() : data.next();
            }
        };
    }

    /** The records of a full-data gradient task: header and weights, then the partition's data. */
    static final class Prepend implements Function2<Integer, Iterator<byte[]>, Iterator<byte[]>> {
        private final IterationContext context;

        Prepend(IterationContext context) {
            this.context = context;
        }

        @Override
        public Iterator<byte[]> call(Integer partition, Iterator<byte[]> records) {
            return context.frames(partition, true, records);
        }
    }
}
