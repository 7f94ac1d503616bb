for s in 0 1 2 3 4 5 6 7; do
  /tmp/tv/bin/python gen.py $s > /dev/null
  k=$(/tmp/same/same | tail -1 | awk '{print $NF}')
  t=$(/tmp/tv/bin/python torch_epochs.py $s | tail -1 | awk '{print $NF}')
  echo "seed $s kiln $k torch $t"
done
