package org.sparkdl.bridge;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;

import org.apache.spark.api.java.JavaSparkContext;
import org.apache.spark.rdd.RDD;
import org.apache.spark.scheduler.TaskLocation;

/**
 * Which cached data partitions each gradient task of the local-copy source computes: the partitions are
 * grouped by the executor that caches them (the task slots shared out over the locations), and within a
 * location balanced by sample count; each group task prefers its executor.
 */
final class GroupAssignment {
    /** Data partitions of each group task. */
    final int[][] table;
    /** Preferred host of each group task (empty: anywhere). */
    final String[][] where;

    private GroupAssignment(int[][] table, String[][] where) {
        this.table = table;
        this.where = where;
    }

    static GroupAssignment of(JavaSparkContext jsc, RDD<byte[]> rdd, long[] sizes, int groups) {
        Map<String, List<Integer>> byLocation = new TreeMap<>();
        for (int p = 0; p < sizes.length; p++) {
            scala.collection.immutable.Seq<TaskLocation> locs = jsc.sc().getPreferredLocs(rdd, p);
            String where = locs.isEmpty() ? "" : locs.apply(0).toString();
            byLocation.computeIfAbsent(where, w -> new ArrayList<>()).add(p);
        }
        int locations = byLocation.size();
        List<List<Integer>> members = new ArrayList<>();
        List<String> hosts = new ArrayList<>();
        int assigned = 0;
        int index = 0;
        for (Map.Entry<String, List<Integer>> e : byLocation.entrySet()) {
            int share = Math.max(1, (groups - assigned) / (locations - index));
            long[] load = new long[share];
            List<List<Integer>> mine = new ArrayList<>();
            for (int i = 0; i < share; i++) {
                mine.add(new ArrayList<>());
            }
            for (int p : e.getValue()) {
                int best = 0;
                for (int i = 1; i < share; i++) {
                    if (load[i] < load[best]) {
                        best = i;
                    }
                }
                mine.get(best).add(p);
                load[best] += Math.max(1, sizes[p]);
            }
            for (List<Integer> m : mine) {
                members.add(m);
                hosts.add(e.getKey());
            }
            assigned += share;
            index++;
        }
        int[][] table = new int[groups][];
        String[][] where = new String[groups][];
        for (int g = 0; g < groups; g++) {
            List<Integer> m = g < members.size() ? members.get(g) : new ArrayList<>();
            table[g] = m.stream().mapToInt(Integer::intValue).toArray();
            String h = g < hosts.size() ? hosts.get(g) : "";
            where[g] = h.isEmpty() ? new String[0] : new String[] {h};
        }
        // More locations than groups: fold the surplus into the last groups (correct, just less local).
        for (int g = groups; g < members.size(); g++) {
            int target = g % groups;
            int[] merged = Arrays.copyOf(table[target], table[target].length + members.get(g).size());
            for (int i = 0; i < members.get(g).size(); i++) {
                merged[table[target].length + i] = members.get(g).get(i);
            }
            table[target] = merged;
        }
        return new GroupAssignment(table, where);
        }
}
