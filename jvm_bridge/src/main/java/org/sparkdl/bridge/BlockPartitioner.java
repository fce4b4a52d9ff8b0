package org.sparkdl.bridge;

import org.apache.spark.Partitioner;

/** Record key k to partition k: gradient blocks to their reduce task, tree nodes to their combine task. */
final class BlockPartitioner extends Partitioner {
    private final int blocks;

    BlockPartitioner(int blocks) {
        this.blocks = blocks;
    }

    @Override
    public int numPartitions() {
        return blocks;
    }

    @Override
    public int getPartition(Object key) {
        return (Integer) key;
    }

    @Override
    public boolean equals(Object o) {
        return o instanceof BlockPartitioner && ((BlockPartitioner) o).blocks == blocks;
    }

    @Override
    public int hashCode() {
        return blocks;
    }
}
