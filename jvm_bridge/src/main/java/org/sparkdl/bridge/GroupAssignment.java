package org.sparkdl.bridge;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;

import org.apache.spark.api.java.JavaSparkContext;
import org.apache.spark.rdd.RDD;
import org.apache.spark.scheduler.TaskLocation;

/**
 * Which cached data partitions each gradient task of the local-copy source computes. The partitions are grouped
 * by the executor that caches them; an executor's partitions are cut into aligned nodes of the summation tree
 * ({@link TreeSum#maximalNodes}, empty partitions count as anyone's), the heaviest node split in halves until the
 * executor's task slots are used, and each task computes whole nodes, so it sends one pre-summed record per node.
 * When every executor holds aligned runs of partition ids (always in local mode) that is one record per task,
 * whatever the number of partitions. The grouping changes how much is pre-summed where, never the sum.
 */
final class GroupAssignment {
    /** Data partitions of each group task. */
    final int[][] table;
    /** Preferred host of each group task (empty: anywhere). */
    final String[][] where;
    /** Gradient records per AllReduce block that the group tasks send (their tree nodes). */
    final int records;

    private GroupAssignment(int[][] table, String[][] where, int records) {
        this.table = table;
        this.where = where;
        this.records = records;
    }

    static GroupAssignment of(JavaSparkContext jsc, RDD<byte[]> rdd, long[] sizes, int groups) {
        Map<String, List<Integer>> byLocation = new TreeMap<>();
        for (int p = 0; p < sizes.length; p++) {
            if (sizes[p] == 0) {
                continue;  // nothing to compute, ever
            }
            scala.collection.immutable.Seq<TaskLocation> locs = jsc.sc().getPreferredLocs(rdd, p);
            String where = locs.isEmpty() ? "" : locs.apply(0).toString();
            byLocation.computeIfAbsent(where, w -> new ArrayList<>()).add(p);
        }
        return of(byLocation, sizes, groups);
    }

    /** The assignment of partitions {@code byLocation} (location to its partitions) to {@code groups} tasks. */
    static GroupAssignment of(Map<String, List<Integer>> byLocation, long[] sizes, int groups) {
        boolean[] free = new boolean[sizes.length];
        for (int p = 0; p < sizes.length; p++) {
            free[p] = sizes[p] == 0;
        }
        int locations = byLocation.size();
        List<int[][]> tasks = new ArrayList<>();  // per task: its nodes {lo, level}
        List<String> hosts = new ArrayList<>();
        int assigned = 0;
        int index = 0;
        for (Map.Entry<String, List<Integer>> e : byLocation.entrySet()) {
            int share = Math.max(1, (groups - assigned) / (locations - index));
            int[] own = e.getValue().stream().mapToInt(Integer::intValue).toArray();
            List<int[]> nodes = split(TreeSum.maximalNodes(own, free, sizes.length), own, sizes, share);
            for (List<int[]> mine : balance(nodes, sizes, share)) {
                tasks.add(mine.toArray(new int[0][]));
                hosts.add(e.getKey());
            }
            assigned += share;
            index++;
        }
        while (tasks.size() < groups) {
            tasks.add(new int[0][]);
            hosts.add("");
        }
        // More locations than groups: fold the surplus into the last groups (correct, just less local).
        List<List<int[]>> merged = new ArrayList<>();
        for (int g = 0; g < tasks.size(); g++) {
            if (g < groups) {
                merged.add(new ArrayList<>(List.of(tasks.get(g))));
            } else {
                merged.get(g % groups).addAll(List.of(tasks.get(g)));
            }
        }
        int[][] table = new int[groups][];
        String[][] where = new String[groups][];
        int records = 0;
        for (int g = 0; g < groups; g++) {
            List<Integer> members = new ArrayList<>();
            for (int[] node : merged.get(g)) {
                for (long p = node[0]; p < Math.min(sizes.length, node[0] + (1L << node[1])); p++) {
                    if (sizes[(int) p] > 0) {
                        members.add((int) p);
                    }
                }
            }
            members.sort(null);
            table[g] = members.stream().mapToInt(Integer::intValue).toArray();
            records += TreeSum.maximalNodes(table[g], free, sizes.length).size();
            String h = hosts.get(g);
            where[g] = h.isEmpty() ? new String[0] : new String[] {h};
        }
        return new GroupAssignment(table, where, records);
    }

    private static long load(int[] node, long[] sizes) {
        long s = 0;
        for (long p = node[0]; p < Math.min(sizes.length, node[0] + (1L << node[1])); p++) {
            s += sizes[(int) p];
        }
        return s;
    }

    /** Split the heaviest nodes in halves (keeping halves with own partitions) until there are {@code share}. */
    private static List<int[]> split(List<int[]> nodes, int[] own, long[] sizes, int share) {
        List<int[]> out = new ArrayList<>(nodes);
        java.util.Set<Integer> mine = new java.util.HashSet<>();
        for (int p : own) {
            mine.add(p);
        }
        while (out.size() < share) {
            int best = -1;
            for (int i = 0; i < out.size(); i++) {
                if (out.get(i)[1] > 0 && (best < 0 || load(out.get(i), sizes) > load(out.get(best), sizes))) {
                    best = i;
                }
            }
            if (best < 0) {
                break;
            }
            int[] node = out.remove(best);
            int half = 1 << (node[1] - 1);
            List<int[]> children = new ArrayList<>();
            for (int lo : new int[] {node[0], node[0] + half}) {
                int[] child = {lo, node[1] - 1};
                boolean any = false;
                for (long p = lo; p < Math.min(sizes.length, (long) lo + half); p++) {
                    any |= mine.contains((int) p);
                }
                if (any) {
                    children.add(child);
                }
            }
            out.addAll(best, children);  // one child only: it holds everything, descend without gaining a task
        }
        return out;
    }

    /** Nodes to {@code share} tasks: one each when they fit, else each to the least loaded task. */
    private static List<List<int[]>> balance(List<int[]> nodes, long[] sizes, int share) {
        List<List<int[]>> tasks = new ArrayList<>();
        long[] loads = new long[share];
        for (int i = 0; i < share; i++) {
            tasks.add(new ArrayList<>());
        }
        for (int i = 0; i < nodes.size(); i++) {
            int best = 0;
            if (nodes.size() <= share) {
                best = i;
            } else {
                for (int t = 1; t < share; t++) {
                    if (loads[t] < loads[best]) {
                        best = t;
                    }
                }
            }
            tasks.get(best).add(nodes.get(i));
            loads[best] += Math.max(1, load(nodes.get(i), sizes));
        }
        return tasks;
    }
}
